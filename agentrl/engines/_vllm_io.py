"""The vLLM adapters' pure translations: agentrl's sampling parameters and token-id prompts
to vLLM's, and vLLM's outputs (in-process `RequestOutput`, server `/v1/completions` JSON)
back to `GenerateResult`. No vLLM import, so the CPU suite tests them without vLLM."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentrl.engines.base import EngineError, FinishReason, GenerateResult, SamplingParams

_FINISH: dict[str | None, FinishReason] = {"stop": "stop", "length": "length", "abort": "abort"}


def to_vllm_sampling(params: SamplingParams) -> dict[str, Any]:
    """Our SamplingParams → kwargs for `vllm.SamplingParams` (one sample, sampled logprob).
    Output text is only needed to match stop strings; without them vLLM skips detokenizing."""
    return {
        "n": 1,
        "max_tokens": params.max_new_tokens,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "top_k": params.top_k if params.top_k > 0 else -1,
        "stop": list(params.stop),
        "stop_token_ids": list(params.stop_token_ids),
        "seed": params.seed,
        "logprobs": 0,  # the sampled token's logprob only
        "include_stop_str_in_output": True,  # keep what the model sampled
        "skip_special_tokens": False,
        "detokenize": bool(params.stop),
    }


def to_vllm_prompt(prompt_ids: Sequence[int], multimodal: dict[str, Any] | None) -> dict[str, Any]:
    """A `TokensPrompt` (a TypedDict, so a plain dict) with optional `multi_modal_data`."""
    prompt: dict[str, Any] = {"prompt_token_ids": [int(t) for t in prompt_ids]}
    if multimodal:
        prompt["multi_modal_data"] = multimodal
    return prompt


def from_vllm_output(output: Any, versions: bool = False) -> GenerateResult:
    """A final `RequestOutput` → GenerateResult (logprob of each sampled id from its dict).
    `versions`: the engine labels its weights (vLLM >= 0.32), so each token's weight version
    comes from the output's spans (`span_versions`)."""
    completion = output.outputs[0]
    ids = [int(t) for t in completion.token_ids]
    if completion.logprobs is None:
        raise EngineError("vLLM returned no logprobs (SamplingParams.logprobs must be set)")
    if len(completion.logprobs) != len(ids):
        raise EngineError(f"vLLM returned {len(completion.logprobs)} logprobs for {len(ids)} ids")
    logprobs = [
        float(step[tok].logprob) for tok, step in zip(ids, completion.logprobs, strict=True)
    ]
    res = GenerateResult(ids, logprobs, _FINISH.get(completion.finish_reason, "error"))
    if versions and completion.weight_versions is not None:
        spans = [(s.version, s.start, s.end) for s in completion.weight_versions]
        res.weight_versions = span_versions(spans, len(ids))
    return res


def span_versions(spans: Sequence[tuple[Any, Any, Any]], n: int) -> list[int]:
    """Per-token versions from vLLM's `weight_versions` spans (`WeightVersionSpan(version,
    start, end)` over output-token indexes, as (version, start, end); labelled by
    `finish_weight_update(weight_version)`). agentrl labels its weights with its update
    count; vLLM's start label ("default") is version 0. Empty when there are no tokens."""
    if not n:
        return []
    out: list[int] = []
    for version, start, end in spans:
        label = str(version)
        out += [int(label) if label.isdigit() else 0] * (int(end) - int(start))
    if len(out) != n:
        raise EngineError(f"vLLM's weight-version spans cover {len(out)} of {n} tokens")
    return out


def to_completions_payload(
    model: str, prompt_ids: Sequence[int], params: SamplingParams
) -> dict[str, Any]:
    """Body for vLLM's `/v1/completions` with a token-id prompt."""
    body = to_vllm_sampling(params)
    del body["n"], body["detokenize"]  # the completions API always returns text
    body.update(
        model=model,
        prompt=[int(t) for t in prompt_ids],
        logprobs=0,
        return_tokens_as_token_ids=True,  # logprobs.tokens become "token_id:<id>"
        return_token_ids=True,  # newer vLLM: choices[0].token_ids
    )
    if body["seed"] is None:
        del body["seed"]
    return body


def to_generate_payload(
    model: str, prompt_ids: Sequence[int], params: SamplingParams, max_tokens: int, seed: Any
) -> dict[str, Any]:
    """Body for vLLM's token-in/token-out `/inference/v1/generate` (a server started with
    `--enable-scale-out`): token ids in, `sampling_params` as `vllm.SamplingParams` takes."""
    sampling = to_vllm_sampling(params)
    sampling.update(max_tokens=max_tokens, seed=seed)
    if sampling["seed"] is None:
        del sampling["seed"]
    return {"model": model, "token_ids": [int(t) for t in prompt_ids], "sampling_params": sampling}


def from_generate_response(body: dict[str, Any]) -> GenerateResult:
    """`/inference/v1/generate` JSON → GenerateResult, each token's weight version from the
    choice's `weight_versions` spans (`span_versions`)."""
    choice = body["choices"][0]
    ids = [int(t) for t in choice.get("token_ids") or []]
    content = (choice.get("logprobs") or {}).get("content") or []
    logprobs = [float(c["logprob"]) for c in content]
    if len(logprobs) != len(ids):
        raise EngineError(f"server returned {len(logprobs)} logprobs for {len(ids)} tokens")
    if [int(c["token_id"]) for c in content] != ids:
        raise EngineError("server's logprobs are not those of the sampled tokens")
    spans = choice.get("weight_versions")
    if spans is None and ids:
        raise EngineError("server returned no weight_versions (a vLLM >= 0.32 server needed)")
    res = GenerateResult(ids, logprobs, _FINISH.get(choice.get("finish_reason"), "error"))
    res.weight_versions = span_versions(
        [(s["version"], s["start"], s["end"]) for s in spans or []], len(ids)
    )
    return res


def from_completions_response(body: dict[str, Any]) -> GenerateResult:
    """`/v1/completions` JSON → GenerateResult; ids from `token_ids` or "token_id:N" tokens."""
    choice = body["choices"][0]
    lp = choice.get("logprobs") or {}
    ids = choice.get("token_ids")
    if ids is None:
        ids = [int(str(t).split("token_id:", 1)[1]) for t in lp.get("tokens", [])]
    logprobs = [float(x) for x in lp.get("token_logprobs") or []]
    if len(logprobs) != len(ids):
        raise EngineError(f"server returned {len(logprobs)} logprobs for {len(ids)} tokens")
    return GenerateResult(
        [int(t) for t in ids], logprobs, _FINISH.get(choice.get("finish_reason"), "error")
    )
