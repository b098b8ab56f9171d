"""Lab configuration: frozen dataclasses validated by pydantic, loaded from TOML or YAML.

A sweep file names the grid (encodings x tasks x seeds x train lengths) and the shared model
and training settings; ``expand`` turns it into one ``RunConfig`` per training run, whose
``key()`` (a hash of the whole run config) is what the result store uses to skip finished runs.

The extend suite's run, ``ExtendConfig`` (``posenc lab extend``; its presets in ``presets``):

What one extension-lab run trains and measures, and the two built-in presets.

``ExtendConfig`` is frozen and checked on creation (ValueError/TypeError naming the field);
``PRESETS["extend"]`` is ``posenc lab --preset extend``, ``PRESETS["quick"]`` its CI smoke
test (``posenc lab extend --quick``). Lengths are token counts: ``context`` L is the training
context, every evaluation length is ``factor·L``.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, ConfigDict, TypeAdapter, ValidationError
from pydantic_core import PydanticCustomError

from .._validate import SEED_LIMIT, check_positive_float, check_positive_int, check_seed

_FORBID = ConfigDict(extra="forbid")


def _not_bool(kind: str, expected: str) -> BeforeValidator:
    """pydantic turns true into 1 for an int (1.0 for a float): refuse a bool there."""

    def refuse(value: object) -> object:
        if isinstance(value, bool):
            raise PydanticCustomError(kind, "Input should be {expected}", {"expected": expected})
        return value

    return BeforeValidator(refuse)


#: An int field of a config: a bool (``steps = true``) is refused, not read as 1.
Int = Annotated[int, _not_bool("int_type", "an integer")]
#: A float field of a config: a bool is refused, not read as 1.0.
Float = Annotated[float, _not_bool("float_type", "a number")]
#: Frameworks a run can train with: torch (posenc.lab.train) or jax (posenc.lab.backend_flax).
BACKENDS = ("torch", "jax")
#: Model architectures a run can train: a decoder-only ``TinyTransformer`` (an encoder for
#: classification) or an ``EncoderDecoder`` (prompt-answer tasks: the prompt is its source).
ARCHITECTURES = ("decoder", "encoder_decoder")
Architecture = Literal["decoder", "encoder_decoder"]


def _positive(obj: object, *names: str) -> None:
    for n in names:
        value = getattr(obj, n)
        if isinstance(value, bool):  # True would count as 1
            raise ValueError(f"{n} must be a number, got {value!r}")
        if value is not None and not value > 0:
            raise ValueError(f"{n} must be > 0, got {value}")


def _check_backend(backend: str) -> None:
    if backend not in BACKENDS:  # train_run would train any other value with torch
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")


#: How the competence gate scores a run (``evaluate.gate_score``); part of every run's key.
#: Until 2026-11-27 the gate pooled the training lengths, keys without this entry; until
#: 2026-11-28 a pass on the gate's fixed samples stood without a fresh confirmation.
GATE_RULE = "worst training length, confirmed on fresh samples"


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """TinyTransformer size: a decoder, or an encoder for classification tasks.
    ``architecture = "encoder_decoder"``: an ``EncoderDecoder`` of ``n_layers`` encoder and
    ``n_layers`` decoder layers for prompt-answer tasks (``LabModel``). ``embed_std``: the
    token embeddings' N(0, embed_std²) init (GPT-2's 0.02; the grid preset's patches 1.0)."""

    __pydantic_config__ = _FORBID
    d_model: Int = 64
    n_layers: Int = 2
    n_heads: Int = 4
    d_ff: Int | None = None
    dropout: Float = 0.0
    architecture: Architecture = "decoder"
    embed_std: Float = 0.02

    def __post_init__(self) -> None:
        if self.architecture not in ARCHITECTURES:
            raise ValueError(
                f"architecture must be one of {ARCHITECTURES}, got {self.architecture!r}"
            )
        _positive(self, "d_model", "n_layers", "n_heads", "d_ff", "embed_std")
        if not math.isfinite(self.embed_std):
            raise ValueError(f"embed_std must be finite, got {self.embed_std}")
        if self.d_model % self.n_heads:
            raise ValueError(
                f"d_model must be divisible by n_heads, got {self.d_model}, {self.n_heads}"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """AdamW with linear warm-up then cosine decay to 10% of ``lr`` over ``decay_steps`` (None:
    ``steps``), the rate staying at 10% after it; gradient clipping. A budget past the decay
    (``steps > decay_steps``) leaves every step before it as it was and gives a run that has
    not passed the gate more steps at the floor rate, where a longer decay would change them
    all. The competence gate: every ``gate_every`` steps (and at the last) the model is
    scored on ``gate_samples`` held-out samples spread over the training lengths; a run stops
    as soon as the score (exact match, or accuracy) reaches ``gate`` at every training length
    (the worst length's score, not the pooled one) and again on ``gate_confirm`` fresh samples
    at every training length, drawn anew for each confirmation, so ``steps`` is a budget.
    ``gate = 0`` turns the gate off: the whole budget is trained and every run passes.
    ``pe_lr_scale`` multiplies the learning rate of the positional encoding's own parameters
    (T5's bias table: ``presets``)."""

    __pydantic_config__ = _FORBID
    steps: Int = 600
    batch_size: Int = 64
    lr: Float = 1e-3
    weight_decay: Float = 0.01
    warmup: Int = 50
    grad_clip: Float = 1.0
    eval_samples: Int = 256
    gate: Float = 0.99
    gate_every: Int = 50
    gate_samples: Int = 256
    gate_confirm: Int = 256
    pe_lr_scale: Float = 1.0
    decay_steps: Int | None = None

    def __post_init__(self) -> None:
        _positive(
            self,
            "steps",
            "batch_size",
            "lr",
            "grad_clip",
            "eval_samples",
            "gate_every",
            "gate_samples",
            "gate_confirm",
            "pe_lr_scale",
        )
        if isinstance(self.gate, bool) or not 0.0 <= self.gate <= 1.0:
            raise ValueError(f"gate must be a score in [0, 1], got {self.gate!r}")
        for n in ("lr", "weight_decay"):  # inf trains to NaN (grad_clip = inf: no clipping)
            if not math.isfinite(getattr(self, n)):
                raise ValueError(f"{n} must be finite, got {getattr(self, n)}")
        if self.decay_steps is not None:
            _positive(self, "decay_steps")
        if self.weight_decay < 0 or self.warmup < 0:
            raise ValueError(
                f"weight_decay and warmup must be >= 0, got {self.weight_decay}, {self.warmup}"
            )


@dataclass(frozen=True, kw_only=True)
class TaskConfig:
    """A task by name with its ``posenc.lab.tasks`` settings (None: the task's default)."""

    __pydantic_config__ = _FORBID
    name: str
    train_len: tuple[Int, Int] | None = None
    eval_lens: tuple[Int, ...] | None = None
    n_symbols: Int | None = None

    def build(self) -> Any:
        from .tasks import make_task

        kw = {k: v for k, v in asdict(self).items() if k != "name" and v is not None}
        return make_task(self.name, **kw)


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    """One training run. ``device`` is where it runs, not what it is: not part of ``key()``."""

    __pydantic_config__ = _FORBID
    encoding: str
    task: TaskConfig
    seed: Int = 0
    pe_config: dict[str, Any] = field(default_factory=dict)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    device: str = "cpu"
    backend: str = "torch"

    def __post_init__(self) -> None:
        check_seed(self.seed)
        _check_backend(self.backend)
        _check_architecture(self.model.architecture, self.backend)

    @property
    def label(self) -> str:
        """The encoding as results name it (``run_label``)."""
        return run_label(self.encoding, self.task.name, self.pe_config, self.model.architecture)

    def key(self) -> str:
        """Hex digest of the canonical JSON of everything but ``device`` (and ``backend`` when
        it is the default torch, ``model.architecture`` when it is the default decoder,
        ``model.embed_std`` when it is the default 0.02, ``train.decay_steps`` when None, so
        the keys of runs made before these existed are unchanged), with the competence gate's
        rule (``GATE_RULE``): runs gated by the earlier pooled score are retrained, not resumed
        as if gated by this one."""
        data = asdict(self)
        data["train"]["gate_rule"] = GATE_RULE
        data.pop("device")
        if data["backend"] == "torch":
            data.pop("backend")
        if data["model"]["architecture"] == "decoder":
            data["model"].pop("architecture")
        if data["model"]["embed_std"] == 0.02:
            data["model"].pop("embed_std")
        if data["train"]["decay_steps"] is None:
            data["train"].pop("decay_steps")
        blob = json.dumps(data, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:20]


def run_label(
    encoding: str, task: str, pe_config: dict[str, Any], architecture: str = "decoder"
) -> str:
    """``encoding``, or ``"alibi (causal form)"`` where an encoder (a classification task)
    keeps the encoding's causal form through ``pe_config`` (``posenc._forms.form_label``);
    ``"rope (encoder-decoder)"`` for an encoder-decoder run, a series of its own."""
    from .._forms import form_label
    from .tasks import TASKS

    encoder = task in TASKS and TASKS[task].kind == "classify"
    return with_architecture(form_label(encoding, pe_config, causal=not encoder), architecture)


def with_architecture(label: str, architecture: str) -> str:
    """``label`` with `` (encoder-decoder)`` for that architecture (decoder: as it is)."""
    return label if architecture == "decoder" else f"{label} ({architecture.replace('_', '-')})"


def stored_label(cfg: dict[str, Any]) -> str:
    """``run_label`` of a run config as stored (``asdict(RunConfig)``; a run stored before
    ``model.architecture`` existed is a decoder's)."""
    architecture = cfg.get("model", {}).get("architecture", "decoder")
    return run_label(cfg["encoding"], cfg["task"]["name"], cfg.get("pe_config", {}), architecture)


def _check_architecture(architecture: str, backend: str) -> None:
    if architecture != "decoder" and backend != "torch":  # posenc.lab.backend_flax: decoders
        raise ValueError(
            f"model.architecture {architecture!r} trains with the torch backend only, got "
            f"backend {backend!r}"
        )


def check_task_architecture(task: Any, architecture: str) -> None:
    """Raise ValueError unless ``task`` (a built ``Task``) can train ``architecture``: an
    encoder-decoder needs a prompt-answer task (its prompt the source, its answer the target)."""
    if architecture == "encoder_decoder" and task.kind != "decoder":
        raise ValueError(
            f"model.architecture 'encoder_decoder' needs a prompt-answer task (source -> "
            f"target), got {task.name!r} ({task.kind}): train it with architecture 'decoder'"
        )


def _trains(encoding: str, task: Any, architecture: str) -> bool:
    """Whether ``encoding`` can train ``task`` (built) as ``architecture``: one computing
    causal attention from the data (``capabilities.attention_form``: fox, stick_breaking,
    path) has no encoder, so neither a classification task's encoder nor an
    encoder-decoder; a lab schedule (``schedules``) builds decoders only. (Unknown names
    pass: ``expand`` reports them.)"""
    from ..registry import info, names
    from .schedules import is_schedule

    if is_schedule(encoding):  # a decoder's layout (``LabModel``)
        return task.kind != "classify" and architecture == "decoder"
    if encoding not in names():
        return True
    causal_only = info(encoding).cls.capabilities.attention_form
    return not causal_only or (task.kind != "classify" and architecture != "encoder_decoder")


def check_encoding_architecture(encoding: str, task: Any, architecture: str) -> None:
    """Raise ValueError unless ``encoding`` can train ``task`` as ``architecture``
    (``_trains``)."""
    if not _trains(encoding, task, architecture):
        from .schedules import is_schedule

        model = "an encoder-decoder" if architecture == "encoder_decoder" else "an encoder"
        what = (
            "is a decoder's per-layer schedule"
            if is_schedule(encoding)
            else "computes causal attention from the data and has no encoder"
        )
        raise ValueError(
            f"encoding {encoding!r} {what}; "
            f"task {task.name!r} ({task.kind}, {architecture}) trains {model}: choose a decoder "
            "task, or leave it out"
        )


@dataclass(frozen=True, kw_only=True)
class SweepConfig:
    """A grid: every encoding x task x seed x longest training length (None: the task's own).

    ``pe_config`` holds extra constructor keys per encoding; ``task_train`` training settings
    per task name over ``train`` (``{sort = {steps = 3000}}``: sort's runs get a budget of
    their own), ``encoding_train`` per encoding over those (``{t5 = {pe_lr_scale = 10}}``).
    ``architectures`` (``["decoder", "encoder_decoder"]``) trains each cell with each
    architecture, side by side; None: ``model.architecture`` alone. ``task_encodings``
    narrows the grid per task name (``{lm = [rope, fox]}``: lm trains those two of
    ``encodings``; a task not named trains every encoding)."""

    __pydantic_config__ = _FORBID
    name: str = "sweep"
    encodings: tuple[str, ...] = ("all",)
    tasks: tuple[TaskConfig, ...] = ()
    seeds: tuple[Int, ...] = (0,)
    train_max_lens: tuple[Int | None, ...] = (None,)
    pe_config: dict[str, dict[str, Any]] = field(default_factory=dict)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    task_train: dict[str, dict[str, Any]] = field(default_factory=dict)
    encoding_train: dict[str, dict[str, Any]] = field(default_factory=dict)
    device: str = "cpu"
    backend: str = "torch"
    architectures: tuple[Architecture, ...] | None = None
    task_encodings: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for what in ("encodings", "tasks", "seeds", "train_max_lens", "architectures"):
            if getattr(self, what) is not None and not getattr(self, what):
                raise ValueError(f"{what} must not be empty")
        if self.architectures is not None and self.model.architecture != "decoder":
            raise ValueError(
                "give architectures or model.architecture, not both, got architectures = "
                f"{list(self.architectures)} and model.architecture = "
                f"{self.model.architecture!r}"
            )
        for architecture in self.architecture_list:
            ModelConfig(architecture=architecture)  # an unknown name, where pydantic is not
            _check_architecture(architecture, self.backend)
        from .tasks import task_names

        for name in self.task_train:  # a misspelt name would leave its task on ``train``
            if name not in task_names():  # (a known task the grid lacks is fine: presets)
                raise ValueError(f"task_train.{name}: unknown task; choose from {task_names()}")
        for name, chosen in self.task_encodings.items():  # a slip would train the whole row
            if name not in task_names():
                raise ValueError(f"task_encodings.{name}: unknown task; choose from {task_names()}")
            stray = [e for e in chosen if e not in self.encodings]
            if not chosen or (stray and "all" not in self.encodings):
                raise ValueError(
                    f"task_encodings.{name} must be a non-empty subset of encodings "
                    f"{list(self.encodings)}, got {list(chosen)}"
                )
        for task in {t.name for t in self.tasks} | set(self.task_train):
            for encoding in (None, *self.encoding_train):
                self.train_for(task, encoding)
        for seed in self.seeds:  # numpy's generators take no negative seed, JAX none >= 2**32
            if not 0 <= seed < SEED_LIMIT:
                raise ValueError(f"seeds must be ints in [0, 2**32), got {list(self.seeds)}")
        check_sweep_name(self.name)
        _check_backend(self.backend)
        if self.device != "cpu" and not self.device.startswith("cuda"):
            raise ValueError(f"device must be 'cpu' or 'cuda[:i]', got {self.device!r}")

    @property
    def architecture_list(self) -> tuple[Architecture, ...]:
        """The architectures each grid cell trains (``architectures``, else the model's)."""
        return self.architectures or (self.model.architecture,)

    def train_for(self, task: str, encoding: str | None = None) -> TrainConfig:
        """``train`` with ``task_train[task]`` over it, then ``encoding_train[encoding]``.
        Raises ValueError naming ``task_train.<task>.<key>`` (``encoding_train.<encoding>...``)
        for a setting that is unknown or invalid."""
        train = self.train
        for what, name in (("task_train", task), ("encoding_train", encoding)):
            override = getattr(self, what).get(name) if name is not None else None
            if not override:
                continue
            try:
                train = TypeAdapter(TrainConfig).validate_python(asdict(train) | override)
            except ValidationError as err:
                problems = [describe_problem(dict(e), _dotted(e["loc"])) for e in err.errors()]
                raise ValueError("; ".join(f"{what}.{name}.{p}" for p in problems)) from None
        return train


def check_sweep_name(name: str) -> None:
    """Raise ValueError for a sweep name that would break the files it is written into: an
    HTML comment's ``<!--`` or ``-->`` (``lab table --into``'s markers are comments: a name
    holding one would end the generated block early) or a control character (a line break)."""
    bad = [s for s in ("<!--", "-->") if s in name]
    if bad or any(ord(c) < 32 or ord(c) == 127 for c in name):
        what = f"{bad[0]!r}" if bad else "a control character"
        raise ValueError(
            f"name must not contain {what} (it goes into Markdown and HTML), got {name!r}"
        )


def parse_sweep(data: dict[str, Any]) -> SweepConfig:
    """Validate a config mapping. Raises ValueError naming the bad key and what was expected."""
    data = dict(data)
    if isinstance(data.get("tasks"), list | tuple):  # "copy" is short for {name = "copy"}
        data["tasks"] = [{"name": t} if isinstance(t, str) else t for t in data["tasks"]]
    if isinstance(data.get("encodings"), str):
        data["encodings"] = [data["encodings"]]
    try:
        return TypeAdapter(SweepConfig).validate_python(data)
    except ValidationError as err:
        raise ValueError(_describe(err)) from None


def _describe(err: ValidationError) -> str:
    """``lab config: train.steps must be > 0, got -3``: one line per problem, no pydantic prefix."""
    problems = [describe_problem(dict(e), _dotted(e["loc"])) for e in err.errors()]
    if len(problems) == 1:
        return f"lab config: {problems[0]}"
    return f"lab config has {len(problems)} problems:\n  " + "\n  ".join(problems)


def _dotted(loc: tuple[int | str, ...]) -> str:
    return "".join(f".{p}" if isinstance(p, str) else f"[{p}]" for p in loc).lstrip(".")


#: pydantic error types -> what was expected, for "KEY must be <expected>, got <input>".
_EXPECTED = {
    "int_parsing": "an integer",
    "int_type": "an integer",
    "int_from_float": "an integer",
    "float_parsing": "a number",
    "float_type": "a number",
    "bool_parsing": "true or false",
    "bool_type": "true or false",
    "string_type": "a string",
    "list_type": "a list",
    "tuple_type": "a list",
    "dict_type": "a table",
    "dataclass_type": "a table",
    "dataclass_args_type": "a table",
}
_MISSING = ("missing", "missing_argument", "missing_keyword_only_argument")
_UNKNOWN = ("unexpected_keyword_argument", "extra_forbidden")
#: A check's own message that starts with the name of the field it is about ("steps must ...").
_NAMED = re.compile(r"^[A-Za-z_]\w* (must|is|are)\b")


def describe_problem(error: dict[str, Any], key: str) -> str:
    """One pydantic error (an item of ``ValidationError.errors()``) about ``key`` as plain text.

    Names the key, says what was expected and what came: ``model.d_model must be an integer,
    got 'abc'``; a dataclass check's own message gets the key in front (``train`` + ``steps
    must be > 0, got -3`` -> ``train.steps must be > 0, got -3``). No "Value error, " or
    "Input should be" and no link to pydantic's docs. Also used by the CLI for its options.
    """
    kind, msg, got = error["type"], str(error["msg"]), error.get("input")
    where = key or "config"
    if kind in _UNKNOWN:
        return f"{where}: unknown key"
    if kind in _MISSING:
        return f"{where} is required"
    if kind in ("value_error", "assertion_error"):
        text = str(error.get("ctx", {}).get("error", msg.split(", ", 1)[-1]))
        if not key:
            return text
        return f"{key}.{text}" if _NAMED.match(text) else f"{key}: {text}"
    expected = _EXPECTED.get(kind)
    if kind in ("too_long", "too_short"):
        bound = error.get("ctx", {})
        most = "at most" if kind == "too_long" else "at least"
        n = bound.get("max_length" if kind == "too_long" else "min_length")
        expected = f"a list of {most} {n} items"
    if expected is None and msg.startswith("Input should be "):
        expected = msg.removeprefix("Input should be ")
    if expected is not None:
        return f"{where} must be {expected}, got {got!r}"
    return f"{where}: {msg[:1].lower()}{msg[1:]}, got {got!r}"


def load_sweep(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> SweepConfig:
    """Read a .toml/.yaml/.yml sweep file, apply ``key.sub=value`` overrides, validate."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"config file {str(path)!r} does not exist")
    return parse_sweep(apply_overrides(read_mapping(path), overrides))


def read_mapping(path: Path) -> dict[str, Any]:
    """The top-level mapping of a TOML or YAML file. Raises ValueError on syntax errors."""
    text = path.read_text()
    if path.suffix == ".toml":
        try:
            import tomllib
        except ImportError:  # Python 3.10
            import tomli as tomllib  # type: ignore[no-redef]
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as err:
            raise ValueError(f"{path}: invalid TOML: {err}") from None
    if path.suffix in (".yaml", ".yml"):
        import yaml

        try:
            data = load_yaml(text) or {}
        except yaml.YAMLError as err:
            raise ValueError(f"{path}: invalid YAML: {yaml_problem(err)}") from None
        if not isinstance(data, dict):
            raise ValueError(
                f"{path}: expected a mapping at the top level, got {type(data).__name__}"
            )
        return data
    raise ValueError(f"config file must end in .toml, .yaml or .yml, got {path.name!r}")


def load_yaml(text: str) -> Any:
    """``text`` read as YAML with YAML 1.2's plain scalars: ``true``/``false`` (not yes/no/on/
    off), decimal numbers only (``0x10``, ``010``, ``1_000`` and ``1:20`` stay strings, where
    YAML 1.1 reads 16, 8, 1000 and 80), and a key given twice in one mapping refused.

    Raises: yaml.YAMLError (a ``ConstructorError`` naming the repeated key and its line).
    """
    import yaml

    return yaml.load(text, Loader=_strict_loader())


def yaml_problem(err: Exception) -> str:
    """A YAML error in one line: what is wrong and where (line and column, 1-based)."""
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    mark = getattr(err, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"{problem}{where}"


def _strict_loader() -> type:
    import yaml

    class StrictLoader(yaml.SafeLoader):
        """SafeLoader with YAML 1.2 core scalars and no repeated keys (``load_yaml``)."""

        def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> Any:
            seen: dict[Any, Any] = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        "while reading a mapping",
                        node.start_mark,
                        f"found the key {key!r} twice (the second would silently win)",
                        key_node.start_mark,
                    )
                seen[key] = key_node
            return super().construct_mapping(node, deep=deep)

    resolvers = {
        first: [(tag, rx) for tag, rx in found if not tag.endswith((":bool", ":int", ":float"))]
        for first, found in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    StrictLoader.yaml_implicit_resolvers = resolvers
    StrictLoader.add_implicit_resolver(
        "tag:yaml.org,2002:bool",
        re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
        list("tTfF"),
    )
    StrictLoader.add_constructor(  # decimal: "010" is 10, as YAML 1.2 reads it (1.1: 8)
        "tag:yaml.org,2002:int", lambda loader, node: int(loader.construct_scalar(node), 10)
    )
    StrictLoader.add_implicit_resolver(
        "tag:yaml.org,2002:int", re.compile(r"^[-+]?[0-9]+$"), list("-+0123456789")
    )
    StrictLoader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(
            r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
            r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
        ),
        list("-+0123456789."),
    )
    return StrictLoader


def apply_overrides(data: dict[str, Any], overrides: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """``model.n_layers=4`` sets ``data["model"]["n_layers"] = 4`` (values parsed as YAML, by
    ``load_yaml``: ``encodings=[rope, alibi]`` is a list, ``0x10`` a string).

    Raises: ValueError naming the override for a malformed one or a value that is no YAML
    (``encodings=[nope``)."""
    import yaml

    out = json.loads(json.dumps(data))  # deep copy of plain data
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ValueError(f"override must look like key.sub=value, got {item!r}")
        try:
            value = load_yaml(raw)
        except yaml.YAMLError as err:
            raise ValueError(f"--set {item!r}: not a valid value ({yaml_problem(err)})") from None
        if isinstance(value, list) and any(v is None for v in value):
            raise ValueError(f"--set {item!r}: an empty item in the list")
        *parents, leaf = key.strip().split(".")
        node = out
        for p in parents:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ValueError(f"override {item!r}: {p!r} is not a table")
        node[leaf] = value
    return out


def expand(sweep: SweepConfig) -> list[RunConfig]:
    """One RunConfig per grid cell, in a fixed order. Raises ValueError for unknown encodings,
    bad encoding config, task settings a task refuses (naming the task), a lab schedule
    (``schedules``) on a backend other than torch, or a run that cannot fit in this machine's
    memory (``footprint.check_fits``: what it needs, what there is)."""
    from ..registry import build_for_model, names
    from .schedules import SCHEDULES, is_schedule, lab_schedule

    for key in ("pe_config", "encoding_train"):
        unknown = sorted(set(getattr(sweep, key)) - set(names()) - set(SCHEDULES))
        if unknown:  # a misspelt name would leave its encoding on the defaults, silently
            raise ValueError(
                f"config key {key!r}: unknown positional encoding {unknown[0]!r}; "
                f"choose one of {names()}"
            )
    every = "all" in sweep.encodings
    encodings = names(axes=1) if every else list(sweep.encodings)
    schedules = [e for e in encodings if is_schedule(e)]
    if schedules and sweep.backend != "torch":  # ``backend_flax`` builds one encoding
        raise ValueError(
            f"lab schedule {schedules[0]!r} trains with the torch backend only, got backend "
            f"{sweep.backend!r}"
        )
    grids = [e for e in encodings if e in names() and e not in names(axes=1)]
    runs = []
    for i, task in enumerate(sweep.tasks):
        for max_len in sweep.train_max_lens:
            t = task if max_len is None else _with_max_len(task, max_len)
            with _config_key(f"tasks[{i}]", t.name):
                built = t.build()
                for architecture in sweep.architecture_list:
                    check_task_architecture(built, architecture)
                    for enc in sweep.task_encodings.get(t.name, encodings):
                        if not every:  # "all" leaves out what cannot train the cell
                            check_encoding_architecture(enc, built, architecture)
                axes = built.axes
            if grids and axes == 1:  # a sequence has no grid positions to read
                raise ValueError(
                    f"config key 'encodings': {grids[0]!r} reads grid positions (images, video); "
                    f"task {t.name!r} is a 1-D sequence: choose among {names(axes=1)}, or a "
                    f"grid task ({', '.join(_grid_tasks())})"
                )
            runs += [
                RunConfig(
                    encoding=enc,
                    task=t,
                    seed=s,
                    pe_config=sweep.pe_config.get(enc, {}),
                    model=replace(sweep.model, architecture=architecture),
                    train=sweep.train_for(t.name, enc),
                    device=sweep.device,
                    backend=sweep.backend,
                )
                for enc in encodings
                if enc in sweep.task_encodings.get(t.name, (enc,))
                for architecture in sweep.architecture_list  # side by side per encoding
                if _trains(enc, built, architecture)
                for s in sweep.seeds
            ]
    from .footprint import check_fits

    check_fits(runs)  # before building anything of the model's size (the encodings below)
    m = sweep.model
    for enc in encodings:
        with _config_key("encodings", enc, TypeError):
            pe_config = sweep.pe_config.get(enc, {})
            if is_schedule(enc):  # its entries are built by the model, checked there
                lab_schedule(enc, pe_config)
                continue
            build_for_model(enc, dim=m.d_model, n_heads=m.n_heads, max_len=64, **pe_config)
    return runs


def _grid_tasks() -> list[str]:
    from .tasks import TASKS

    return [name for name, t in TASKS.items() if t.axes > 1]


def _with_max_len(task: TaskConfig, max_len: int) -> TaskConfig:
    from .tasks import TASKS

    if task.name not in TASKS:
        return task  # expand reports the unknown name
    lo = task.train_len[0] if task.train_len else TASKS[task.name]().train_len[0]
    return replace(task, train_len=(min(lo, max_len), max_len))


@contextmanager
def _config_key(key: str, name: str, also: type[Exception] = ValueError) -> Iterator[None]:
    """Re-raise a ValueError (or ``also``) as one naming the config key and the entry."""
    try:
        yield
    except (ValueError, also) as err:
        raise ValueError(f"config key {key!r} ({name}): {err}") from None


# --- the extend suite (``posenc lab extend``) --------------------------------------------------
# What one run of the context-extension suite trains and measures (its presets: ``presets``).
# Lengths are token counts: ``context`` L is the training context, every evaluation length is
# ``factor·L``. Its units run in ``posenc.lab.extension``.

#: RoPE's context-extension methods, in display order ("none": unchanged, extrapolation).
EXTEND_METHODS = ("none", "linear", "ntk", "dynamic", "yarn", "llama3", "longrope")
#: Encodings trained the same way, evaluated without any change.
EXTEND_BASELINES = ("alibi", "nope", "fire")


@dataclass(frozen=True, kw_only=True)
class ExtendConfig:
    """One extension-lab run (defaults: the ``extend`` preset).

    Model: ``d_model``, ``n_layers``, ``n_heads`` (TinyTransformer, RoPE base 10 000).
    Pre-training: ``steps`` AdamW steps of ``batch`` rows at context ``context``, a
    ``passkey_fraction`` of the rows passkey prompts (keys of ``passkey_digits`` tokens);
    FIRE's own parameters (its MLP, c and threshold) at ``fire_lr_scale`` times ``lr``.
    Fine-tune: ``round(ft_fraction·steps)`` steps at each longer length at ``ft_lr``, with the
    tokens per step of pre-training (``batch // factor`` rows, at least 2).
    Measures: loss over ``eval_tokens`` held-out tokens per length in buckets of
    ``bucket`` positions; passkey at ``depths`` with ``trials`` keys per cell; a stream of
    ``max(factors)·context`` tokens (``stream_rows`` texts) through a cache of ``window`` keys
    with ``sinks`` sink tokens or none. LongRoPE's factors: a search of ``search_generations``
    generations of ``search_children``, each candidate scored on ``search_windows`` windows of
    training text (Ding et al. 2024, scaled down).
    """

    name: str = "extend"
    context: int = 64
    factors: tuple[int, ...] = (2, 4, 8)
    seeds: tuple[int, ...] = (0, 1, 2)
    methods: tuple[str, ...] = EXTEND_METHODS
    baselines: tuple[str, ...] = EXTEND_BASELINES
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    steps: int = 2000
    batch: int = 16
    lr: float = 3e-3
    fire_lr_scale: float = 0.3
    warmup: int = 50
    passkey_fraction: float = 0.5
    passkey_digits: int = 2
    ft_fraction: float = 0.04
    ft_lr: float = 1e-3
    eval_tokens: int = 8192
    bucket: int = 16
    depths: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)
    trials: int = 4
    window: int = 32
    sinks: int = 4
    stream_rows: int = 4
    search_generations: int = 4
    search_children: int = 8
    search_windows: int = 8
    gate: float = 0.9

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, list):  # from JSON: tuples
                object.__setattr__(self, f.name, tuple(value))
            elif isinstance(f.default, tuple) and not isinstance(value, tuple):
                raise TypeError(
                    f"extend config {f.name!r} must be a list, got {type(value).__name__} "
                    f"{value!r} (e.g. --set {f.name}={json.dumps(list(f.default)[:2])})"
                )
        if not isinstance(self.name, str):
            raise TypeError(f"extend config 'name' must be a string, got {self.name!r}")
        check_sweep_name(self.name)
        for seed in self.seeds:
            check_seed(seed, "extend config 'seeds' item")
        ints = ["context", "d_model", "n_layers", "n_heads", "steps", "batch", "warmup"]
        ints += ["passkey_digits", "eval_tokens", "bucket", "trials", "window", "stream_rows"]
        ints += ["search_generations", "search_children", "search_windows"]
        for key in ints:
            check_positive_int(getattr(self, key), f"extend config {key!r}")
        check_positive_int(self.sinks, "extend config 'sinks'", minimum=0)
        for key in ("lr", "ft_lr", "ft_fraction", "fire_lr_scale"):
            check_positive_float(getattr(self, key), f"extend config {key!r}")
        for key in ("passkey_fraction", "gate"):
            check_positive_float(getattr(self, key), f"extend config {key!r}", upper=1.0)
        if not self.factors or any(
            isinstance(f, bool) or not isinstance(f, int) or f < 2 for f in self.factors
        ):
            raise ValueError(f"factors must be ints >= 2, got {list(self.factors)}")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds must be distinct, at least one, got {list(self.seeds)}")
        _check_subset(self.methods, EXTEND_METHODS, "methods")
        _check_subset(self.baselines, EXTEND_BASELINES, "baselines")
        if "none" not in self.methods:
            raise ValueError(
                "methods must include 'none' (the unchanged model every row compares to)"
            )
        if self.d_model % self.n_heads or (self.d_model // self.n_heads) % 4:
            raise ValueError(
                "d_model / n_heads (the rotated head width) must be a multiple of 4 (NTK and YaRN "
                f"need >= 2 frequency pairs), got d_model={self.d_model}, n_heads={self.n_heads}"
            )
        if any(not 0.0 <= d <= 1.0 for d in self.depths) or not self.depths:
            raise ValueError(f"depths must lie in [0, 1], got {list(self.depths)}")
        if self.context < 4 * (self.passkey_digits + 3):
            raise ValueError(
                f"context {self.context} is too short for passkey prompts of "
                f"{self.passkey_digits} digits (needs >= {4 * (self.passkey_digits + 3)})"
            )
        if self.sinks + self.window > self.context:
            raise ValueError(
                f"sinks + window ({self.sinks} + {self.window}) must fit the training context "
                f"{self.context} (cache positions stay inside it)"
            )

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def ft_steps(self) -> int:
        """Fine-tuning steps: a few percent of pre-training (at least one)."""
        return max(1, round(self.ft_fraction * self.steps))

    @property
    def max_len(self) -> int:
        """The longest context anything is evaluated at."""
        return max(self.factors) * self.context

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    def digest(self) -> str:
        """A hash of every setting: a result store holds the results of one configuration."""
        text = json.dumps(self.to_dict(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def _check_subset(values: tuple[str, ...], allowed: tuple[str, ...], key: str) -> None:
    unknown = [v for v in values if v not in allowed]
    if unknown or len(set(values)) != len(values):
        raise ValueError(f"{key} must be distinct names from {list(allowed)}, got {list(values)}")
