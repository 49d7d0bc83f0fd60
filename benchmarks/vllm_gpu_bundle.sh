#!/usr/bin/env bash
# Build, on a CPU machine with PyPI, the parts that bring real vLLM 0.26.0 to the device tool's GPU
# machine (torch 2.11.0+cu130, Python 3.12, no package index; each call carries at most 64 MiB
# of working tree). Recipe: shared notes vllm-on-gpu.md; steps and sizes: benchmarks/notes/vllm-gpu.md.
#   bash benchmarks/vllm_gpu_bundle.sh        # -> .gpuparts/vllm/vllm-0.26.0-<id>.part<i>of<n>
# Then, on the device, one part per call: benchmarks/vllm_gpu_install.sh (this prints the calls).
# Why vLLM 0.26.0: the newest release that pins torch==2.11.0, the GPU machine's torch.
# Why trimmed: its wheel is 290 MiB; three binaries a bf16 dense model on Hopper never loads
# are dropped (DROP below) and the rest re-tarred with xz, about 73 MiB.
# Output in .gpuparts/ (ignored), not .gpuwheels/: GPU runs carry .gpuwheels/ whole (gpu_env.sh),
# and 131 MiB of parts (or the 345 MiB download cache) there would put every such call over 64 MiB.
# Env: VLLM_BUNDLE_DIR (output folder), VLLM_PART_MIB (largest part, default 50: the parts travel
# beside the working tree, ~7 MiB, under the tool's 64 MiB), XZ_THREADS (default 2).
set -euo pipefail
R=$(cd "$(dirname "$0")/.." && pwd)
OUT=${VLLM_BUNDLE_DIR:-$R/.gpuparts/vllm}
PART_MIB=${VLLM_PART_MIB:-50}
VLLM=0.26.0
DROP="vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so vllm/_moe_C_stable_libtorch.abi3.so vllm/vllm-rs"
# FA2 (SM90 runs FA3; the FA2 import is in a try), MoE kernels (import suppressed; dense models
# never call them), the optional Rust front end.

# Pins. Each is the newest release uploaded to PyPI before vllm 0.26.0 itself
# (2026-07-25T10:40Z) that has a cp312/abi3/py3 manylinux (glibc <= 2.35) x86_64 wheel and meets
# vllm 0.26.0's Requires-Dist and those of the other pins (checked below, at build time).
# Read from PyPI's simple index (PEP 691 JSON: upload-time, sha256) on 2026-12-06. Where that
# rule did not give the newest: pydantic-core 2.46.4 (pydantic 2.13.4 pins it; 2.47.0 was newer),
# xgrammar 0.2.3 (0.2.4 has no cp312 x86_64 wheel), fastapi 0.136.3 (vllm: <0.137).
# apache-tvm-ffi is not in the notes' list: xgrammar 0.2.x imports tvm_ffi at load time and the
# GPU machine lacks it; 0.1.10 is vllm 0.26.0's own pin. Everything else these wheels need
# (anyio, httpx, tqdm, typing-extensions, annotated-doc, transformers, torch, triton, numpy) is
# on the GPU machine (device KINDS.md package list); the install script checks it there.
PINS=$(cat <<'EOF'
vllm==0.26.0 --hash=sha256:adb1e4c9b46d0dfdb094121ae5aad670a42412dd813ed4e5db069ed6a15006de
cachetools==7.1.6 --hash=sha256:2c12e255780330af28b91bb7fb96cce4c766f04e38396b9a24510190a5827096
cbor2==6.1.3 --hash=sha256:2226d32e102e375737656ad5d141ad8c6ae3e705e04e263f24756f0eb379c6c1
msgspec==0.21.1 --hash=sha256:21995e74b5c598c2e004110ad66ec7f1b8c20bf2bcf3b2de8fd9a3094422d3ff
pyzmq==27.1.0 --hash=sha256:43ad9a73e3da1fab5b0e7e13402f0b2fb934ae1c876c51d0afff0e7c052eca31
pybase64==1.4.3 --hash=sha256:bb632edfd132b3eaf90c39c89aa314beec4e946e210099b57d40311f704e11d4
partial-json-parser==0.2.1.1.post7 --hash=sha256:145119e5eabcf80cbb13844a6b50a85c68bf99d376f8ed771e2a3c3b03e653ae
pydantic==2.13.4 --hash=sha256:45a282cde31d808236fd7ea9d919b128653c8b38b393d1c4ab335c62924d9aba
pydantic-core==2.46.4 --hash=sha256:926c9541b14b12b1681dca8a0b75feb510b06c6341b70a8e500c2fdcff837cce
annotated-types==0.8.0 --hash=sha256:f072f4d804ea359e4eaf198b1af7a8b0943881a87f31bb764f8bf219bb9419e0
typing-inspection==0.4.2 --hash=sha256:4ed1cacbdc298c220f1bd249ed5287caa16f34d44ef4e9c3d0cbad5b521545e7
fastapi==0.136.3 --hash=sha256:3d2a69bdf04b7e9f3afa292c3bc7a98816bbfafa10bc9b45f3f3700d2f761620
starlette==1.3.1 --hash=sha256:c7372aae11c3c3f26a42df7bd626cec2f47d03483d261d369516a615a53714c6
openai==2.48.0 --hash=sha256:c98df30aaaf93c51979f64d3e7c5b76464f8be0173368266229eb8fe6bd30f2c
jiter==0.16.0 --hash=sha256:46add52f4ad47a08bfb1219f3e673da972191489a33016edefdb5ea55bfa8c48
distro==1.9.0 --hash=sha256:7bffd925d65168f85027d8da9af6bddab658135b840670a223589bc0c8ef02b2
sniffio==1.3.1 --hash=sha256:2f6da418d1f1e0fddd844478f41680e794e6051915791a034ff65e5f100525a2
openai-harmony==0.0.8 --hash=sha256:c007d277218a50db8839e599ed78e0fffe5130f614c3f6d93ae257f282071a29
blake3==1.0.9 --hash=sha256:bcd56a7a972c4185070f7042ccc20166927eec3c0f98b8405f375d007b604a0b
setproctitle==1.3.7 --hash=sha256:2906b6c7959cdb75f46159bf0acd8cc9906cf1361c9e1ded0d065fe8f9039629
depyf==0.20.0 --hash=sha256:d31effad4261cebecb58955d832e448ace88f432328f95f82fd99c30fd9308d4
astor==0.8.1 --hash=sha256:070a54e890cefb5b3739d19f30f5a5ec840ffc9c50ffa7d23cc9fc1a38ebbfc5
dill==0.4.1 --hash=sha256:1e1ce33e978ae97fcfcff5638477032b801c46c7c65cf717f95fbc2248f79a9d
llguidance==1.7.6 --hash=sha256:ceec951d29a74309984e3be0fe7f5f56c1362434cd937abd517b259a60908b1e
xgrammar==0.2.3 --hash=sha256:fdf081fab29694302d41d61dcf52fad7d253879a718bc6afc68db0a0dabd7f19
apache-tvm-ffi==0.1.10 --hash=sha256:96b69030c722572e13e30182733adfa2d604258e988b3f6630a16f397c7f9288 --hash=sha256:73d478395a8625dd92fde7b7fd92b4719f18f480b78336e422cb66cc7985213d
EOF
)

DL=$OUT-download WORK=$OUT-build  # beside the parts: a folder of parts holds parts only
mkdir -p "$DL"
printf '%s\n' "$PINS" >"$OUT/requirements.txt"
echo "== download (pip reuses files already in $DL after checking their hash)"
platforms=""
for p in 31 28 27 26 24 17 5; do platforms+=" --platform manylinux_2_${p}_x86_64"; done
# shellcheck disable=SC2086
python3 -m pip download -q --isolated --disable-pip-version-check --cert "${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}" \
  --index-url https://pypi.org/simple --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp $platforms --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
  --require-hashes -r "$OUT/requirements.txt" -d "$DL"

echo "== check the pins against vllm $VLLM's METADATA and each other's"
wheels=$(python3 "$R/benchmarks/vllm_gpu_pins.py" "$OUT/requirements.txt" "$DL")
mapfile -t WHEELS <<<"$wheels"

echo "== trim vllm (drop: $DROP) and re-tar with xz"
rm -rf "$WORK" && mkdir -p "$WORK/tree" "$WORK/bundle/wheels"
python3 -m zipfile -e "$DL/vllm-$VLLM-cp38-abi3-manylinux_2_28_x86_64.whl" "$WORK/tree"
for f in $DROP; do
  [ -f "$WORK/tree/$f" ] || { echo "vllm wheel has no $f: its layout changed, check DROP" >&2; exit 1; }
  rm "$WORK/tree/$f"
done
chmod -R u+rwX,go+rX "$WORK/tree"
tar -C "$WORK/tree" --sort=name --owner=0 --group=0 --numeric-owner --mtime=2026-07-25 -cf - . |
  xz -6 -T"${XZ_THREADS:-2}" >"$WORK/bundle/vllm-$VLLM-trimmed.tar.xz"
for w in "${WHEELS[@]}"; do [[ $w == vllm-* ]] || cp "$DL/$w" "$WORK/bundle/wheels/"; done
printf 'vllm %s trimmed (dropped: %s); built %s\n' "$VLLM" "$DROP" "$(date -u +%FT%TZ)" >"$WORK/bundle/BUILD"
(cd "$WORK/bundle" && sha256sum BUILD "vllm-$VLLM-trimmed.tar.xz" wheels/*.whl >SHA256SUMS)

echo "== bundle and split into parts of at most $PART_MIB MiB"
tar -C "$WORK" --sort=name --owner=0 --group=0 --numeric-owner -cf "$WORK/bundle.tar" bundle
size=$(stat -c %s "$WORK/bundle.tar")
n=$(((size + PART_MIB * 1048576 - 1) / (PART_MIB * 1048576)))
[ "$n" -le 9 ] || { echo "bundle of $size bytes needs $n parts; raise VLLM_PART_MIB" >&2; exit 1; }
id=$(sha256sum "$WORK/bundle.tar" | cut -c1-12)
rm -f "$OUT"/vllm-"$VLLM"-*.part*
split -n "$n" -d -a 1 --numeric-suffixes=1 "$WORK/bundle.tar" "$WORK/p"
for i in $(seq 1 "$n"); do mv "$WORK/p$i" "$OUT/vllm-$VLLM-$id.part${i}of$n"; done
rm -rf "$WORK"

echo "== $n parts, bundle id $id ($(numfmt --to=iec-i --suffix=B "$size") in all):"
for f in "$OUT"/vllm-"$VLLM"-"$id".part*; do
  printf '  %s  %s\n' "$(numfmt --to=iec-i --suffix=B --format=%.1f "$(stat -c %s "$f")")" "${f#"$R"/}"
done
echo "On the device, one part per call, each call right after the last (files last ~30 s):"
for i in $(seq 1 "$n"); do
  p=${OUT#"$R"/}/vllm-$VLLM-$id.part${i}of$n
  if [ "$i" -lt "$n" ]; then
    echo "  carry [\"$p\"]: bash benchmarks/vllm_gpu_install.sh stash $p"
  else
    echo "  carry [\"$p\"]: bash benchmarks/vllm_gpu_install.sh install --check $p && <your run>"
  fi
done
