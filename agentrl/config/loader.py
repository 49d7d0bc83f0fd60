"""Typed config: YAML maps 1:1 onto nested dataclasses; unknown keys and wrong types are errors.

    cfg = load_config(TrainConfig, "configs/quickstart-cpu.yaml", ["trainer.steps=20"])

Every error names the dotted key and the file it came from, e.g.
`configs/x.yaml: trainer.stpes: unknown key (did you mean 'steps'?)`.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml

from .engine import MOVED_KEYS, EngineConfig

T = TypeVar("T")


# Top-level sections of a verl config that agentrl has no section for: an unknown key among
# them points at the translator (`agentrl config import-verl`) instead of a did-you-mean.
VERL_ONLY_KEYS = frozenset(
    {"actor_rollout_ref", "critic", "reward_model", "custom_reward_function", "ray_init"}
)


class ConfigError(ValueError):
    """A config key is unknown, mistyped, or has a bad value."""


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _coerce(value: Any, tp: Any, key: str, src: str) -> Any:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for a in (a for a in args if a is not type(None)):
            try:
                return _coerce(value, a, key, src)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(f"{src}: {key}: {value!r} is not a {_type_name(tp)}")
    if origin is Literal:
        if value not in args:
            near = difflib.get_close_matches(str(value), [str(a) for a in args], n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise ConfigError(f"{src}: {key}: {value!r} is not one of {list(args)}{hint}")
        return value
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{src}: {key}: expected a mapping for {tp.__name__}")
        return from_dict(tp, value, src, prefix=key)
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{src}: {key}: expected a list, got {value!r}")
        item = args[0] if args else Any
        out = [_coerce(v, item, f"{key}[{i}]", src) for i, v in enumerate(value)]
        return tuple(out) if origin is tuple else out
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{src}: {key}: expected a mapping, got {value!r}")
        vt = args[1] if len(args) == 2 else Any
        return {k: _coerce(v, vt, f"{key}.{k}", src) for k, v in value.items()}
    if tp is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if tp is float and isinstance(value, str):
        try:
            return float(value)  # YAML 1.1 reads "1e-5" as a string
        except ValueError:
            pass
    if (
        isinstance(tp, type)
        and isinstance(value, tp)
        and not (tp is int and isinstance(value, bool))
    ):
        return value
    raise ConfigError(f"{src}: {key}: expected {_type_name(tp)}, got {value!r}")


def yaml_name(f: dataclasses.Field[Any]) -> str:
    """A field's key in YAML: its name, or `metadata["yaml"]` where the name is a Python
    keyword (`trainer.async` is the field `async_`)."""
    return str(f.metadata.get("yaml", f.name))


def from_dict(cls: type[T], data: dict[str, Any], src: str = "<dict>", prefix: str = "") -> T:
    """Build dataclass `cls` from a mapping, strictly."""
    hints = typing.get_type_hints(cls)
    fields = {yaml_name(f): f.name for f in dataclasses.fields(cls) if f.init}  # type: ignore[arg-type]
    names = list(fields)
    kwargs = {}
    for k, v in data.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if k not in fields:
            if key in MOVED_KEYS:  # an old key: one line naming where it went
                raise ConfigError(f"{src}: {key}: {MOVED_KEYS[key]}")
            near = difflib.get_close_matches(str(k), names, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            if not prefix and k in VERL_ONLY_KEYS:
                hint = " (a verl section; translate the verl YAML: agentrl config import-verl FILE)"
            raise ConfigError(f"{src}: {key}: unknown key{hint}")
        kwargs[fields[k]] = _coerce(v, hints[fields[k]], key, src)
    try:
        return cls(**kwargs)
    except TypeError as e:
        raise ConfigError(f"{src}: {prefix or cls.__name__}: {e}") from e
    except ValueError as e:  # a __post_init__ check; its message names the key
        raise ConfigError(f"{src}: {e}") from e


def to_dict(cfg: Any, *, changed_tuning_only: bool = False) -> dict[str, Any]:
    """The config as plain data under its YAML keys (what `from_dict` reads back). With
    `changed_tuning_only`, a `tuning` section (a field with `metadata["tuning"]`) keeps only
    the keys that differ from its defaults, and is left out where none does."""
    out = dataclasses.asdict(cfg)
    _rename_yaml_keys(type(cfg), out, changed_tuning_only)
    return out


def _rename_yaml_keys(cls: Any, d: dict[str, Any], changed_tuning_only: bool = False) -> None:
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if changed_tuning_only and f.metadata.get("tuning") and isinstance(d.get(f.name), dict):
            default = dataclasses.asdict(tp())
            d[f.name] = {k: v for k, v in d[f.name].items() if v != default[k]}
            if not d[f.name]:
                del d[f.name]
        elif dataclasses.is_dataclass(tp) and isinstance(d.get(f.name), dict):
            _rename_yaml_keys(tp, d[f.name], changed_tuning_only)
        if yaml_name(f) != f.name and f.name in d:
            d[yaml_name(f)] = d.pop(f.name)


def apply_override(data: dict[str, Any], override: str, schema: Any = None) -> None:
    """Apply `a.b.c=value` (value parsed as YAML) to a nested mapping in place. With `schema`
    (the config's dataclass), a value for a whole section (`trainer=3`) is refused here, so
    the error names this override rather than a later `trainer.steps=2`."""
    if "=" not in override:
        raise ConfigError(f"override {override!r}: expected key=value")
    key, raw = override.split("=", 1)
    parts = key.strip().split(".")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as e:
        raise ConfigError(
            f"override {override!r}: value is not valid YAML ({e.__class__.__name__})"
        ) from None
    section = _section_at(schema, parts)
    if section is not None and not isinstance(value, dict):
        raise ConfigError(
            f"override {override!r}: {key.strip()} is a section ({section.__name__}), not a "
            f"value: set its keys ({key.strip()}.KEY=VALUE)"
        )
    node = data
    for p in parts[:-1]:
        node = node.setdefault(p, {})
        if not isinstance(node, dict):
            raise ConfigError(f"override {override!r}: {p} is not a section")
    node[parts[-1]] = value


def _section_at(schema: Any, parts: list[str]) -> type | None:
    """The dataclass that the dotted key `parts` names in `schema`, if it names a section."""
    tp = schema
    for part in parts:
        if not (isinstance(tp, type) and dataclasses.is_dataclass(tp)):
            return None
        names = {yaml_name(f): f.name for f in dataclasses.fields(tp)}
        if part not in names:
            return None
        tp = typing.get_type_hints(tp)[names[part]]
    return tp if isinstance(tp, type) and dataclasses.is_dataclass(tp) else None


def load_config(
    cls: type[T],
    path: str | Path | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    *,
    validate: bool = True,
) -> T:
    """Load YAML `path` (or defaults) into `cls`, then apply `key=value` overrides.

    A `TrainConfig` is then range-checked (`validate.validate`) unless `validate=False`. The
    checks that need registries (env ids, estimators, engine options, model files) are the
    wiring room's: `agentrl.assembly.validate.load_train_config` runs both."""
    data: dict[str, Any] = {}
    src = config_source(path, overrides)
    if path:
        data = read_yaml(path)
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: top level must be a mapping")
    _leave_out_other_kinds_options(data, overrides)
    for o in overrides:
        apply_override(data, o, cls)
    cfg = from_dict(cls, data, src)
    if validate:
        from .schema import TrainConfig

        if isinstance(cfg, TrainConfig):
            from .validate import validate as check

            check(cfg, src)
    return cfg


def _leave_out_other_kinds_options(data: dict[str, Any], overrides: Sequence[str]) -> None:
    """An override `engine.kind=K` that changes the file's engine kind leaves out the file's
    options of its own kind (`engine.hf`, `engine.extra`), with one warning naming them.

    Why: a recipe tuned for one engine (`engine.hf.fast`, `max_seq_len`, session slots) run
    with `engine.kind=vllm` on the command line was refused for each of those keys in turn
    (they are errors for a vLLM engine, as they must be when written beside it), and the user
    had to reset every one by hand. The file's options belonged to the file's kind; options
    given on the command line are applied after this and still checked."""
    kinds = [o.split("=", 1)[1] for o in overrides if o.split("=", 1)[0].strip() == "engine.kind"]
    engine = data.get("engine")
    if not kinds or not isinstance(engine, dict):
        return
    try:
        new = yaml.safe_load(kinds[-1])
    except yaml.YAMLError:
        return  # `apply_override` names it
    old = engine.get("kind", EngineConfig().kind)
    dropped = [k for k in ("hf", "extra") if engine.get(k)] if new != old else []
    if dropped:
        for k in dropped:
            del engine[k]
        logging.getLogger("agentrl.config").warning(
            "engine.kind=%s on the command line: the config file's options of engine.kind=%s "
            "(%s) are left out",
            new,
            old,
            ", ".join(f"engine.{k}" for k in dropped),
        )


def config_source(path: str | Path | None, overrides: list[str] | tuple[str, ...]) -> str:
    """How `load_config` names where a config came from in its errors."""
    return (str(path) if path else "<defaults>") + (" + overrides" if overrides else "")


def read_yaml(path: str | Path) -> Any:
    """The parsed file; a missing file or a YAML syntax error is one `ConfigError` line."""
    try:
        with open(path, encoding="utf-8") as f:
            return yaml.safe_load(f) or {}
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file{nearest_config(path)}") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, not a YAML config file") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{where}: invalid YAML: {problem}") from None


def nearest_config(path: str | Path) -> str:
    """`; did you mean X?` for a missing config file: the closest YAML name beside it or among
    the shipped recipes (`agentrl.configs`), or ``."""
    import importlib.resources

    path = Path(path)
    where: dict[str, str] = {}
    folder = path.parent if path.parent.is_dir() else None
    if folder is not None:
        where |= {p.name: str(p) for p in sorted(folder.glob("*.y*ml"))}
    shipped = importlib.resources.files("agentrl.configs")
    for entry in shipped.iterdir():
        if entry.name.endswith((".yaml", ".yml")):
            where.setdefault(entry.name, f"configs/{entry.name}")
    stems = {Path(name).stem: name for name in where}  # `.yaml` alone is no likeness
    near = difflib.get_close_matches(path.stem, list(stems), n=1, cutoff=0.6)
    return f"; did you mean {where[stems[near[0]]]}?" if near else ""


def dump_yaml(cfg: Any, *, changed_tuning_only: bool = False) -> str:
    """The config as YAML (`to_dict`); `changed_tuning_only` for what a person reads."""
    return yaml.safe_dump(to_dict(cfg, changed_tuning_only=changed_tuning_only), sort_keys=False)
