"""Pack what ``benchmarks/gpu_smoke.py`` needs on a bare GPU machine without internet, beside the repository.

Such a machine has torch, transformers, accelerate, pandas, numpy, scipy, scikit-learn, PyYAML, safetensors,
tokenizers, typer and rich, but not the project's other needs on the training path. This writes ``OUT/``:

    wheels/     pydantic, pydantic-core, annotated-types, typing-inspection, krippendorff (pip download, binary wheels
                for CPython 3.12 on manylinux x86-64; the versions installed here)
    minilm/     all-MiniLM-L6-v2's config and tokenizer, its weights in fp16, gzipped (model.fp16.safetensors.gz:
                under half the bytes; gpu_smoke.py --pack restores them to float32). Of the word embeddings only the
                rows of the token ids that the benchmark's texts and the tokenizer's special tokens use travel; the
                others are restored as zeros. A Mohler run never reads them (the embedding lookup takes its rows, and
                AdamW leaves rows without gradient at zero), so its training is the same as with every row, in
                fewer bytes; the restored encoder is for these measurements, not for other text.
                ``--all-rows`` packs every row.
    datasets.tgz  mohler/ and mohler-concepts/ from the data directory, as one archive (hundreds of small files would
                cost more of what travels than their bytes)
    RUN.txt     the commands to run there

    python benchmarks/gpu_pack.py --out .gpu                    # then carry .gpu (ignored by git) beside the checkout
    python benchmarks/gpu_pack.py --smoke --backbone PATH      # the fp16 round trip on a tiny model, no download
"""

from __future__ import annotations

import argparse
import gzip
import os
import subprocess
import sys
import tarfile
import tempfile
from importlib.metadata import version
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

WHEELS = ("pydantic", "pydantic-core", "annotated-types", "typing-inspection", "krippendorff")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64")
SMOKE_TEXTS = ["a stack stores elements last in first out", "what is a queue"]
RUN = """python3 -m pip install -q --no-index --no-deps --target /tmp/site {out}/wheels/*.whl
PYTHONPATH=/tmp/site:. python3 benchmarks/gpu_smoke.py --pack {out}
"""


# a trimmed embedding travels as its kept rows and their ids (gpu_smoke.packed_weights)
ROWS, INDEX = "::rows", "::index"


def used_token_ids(src: str, texts: list[str]) -> list[int]:
    """The token ids of ``texts`` (each tokenised alone: word pieces do not cross words, so a pair of them uses no
    other ids) and every special token of the tokenizer, sorted."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(src)
    ids = set(tok.all_special_ids)
    for row in tok(texts, add_special_tokens=True)["input_ids"]:
        ids.update(row)
    return sorted(ids)


def benchmark_texts(data_dir: str) -> list[str]:
    """Every text a Mohler run encodes: questions, references, answers and the rubric's own words (the data packed
    beside it: the pack's rows and its data agree by construction)."""
    from rubrictool.pipeline import benchmark_table

    rubric, table, _ = benchmark_table("mohler", data_dir)
    texts = [str(t) for col in ("question", "reference", "response") for t in table[col].dropna().unique()]
    for c in rubric.concepts:
        texts += [c.key, c.name, c.definition, *(lv.anchor for lv in c.levels)]
    return texts


def pack_backbone(src: str, to: Path, keep_ids: list[int] | None = None) -> int:
    """The backbone folder ``src`` as config + tokenizer + fp16 weights in ``to``; with ``keep_ids`` only those rows of
    the word embeddings (stored as ``NAME::rows`` and ``NAME::index``); returns the bytes written."""
    import torch
    from safetensors.torch import save
    from transformers import AutoModel

    to.mkdir(parents=True, exist_ok=True)
    model = AutoModel.from_pretrained(src)
    state = {k: v.detach().to(torch.float16) if v.is_floating_point() else v.detach()
             for k, v in model.state_dict().items()}
    if keep_ids is not None:
        emb = model.get_input_embeddings().weight
        name = next(k for k, v in model.state_dict().items() if v.data_ptr() == emb.data_ptr())
        index = torch.tensor(keep_ids, dtype=torch.long)
        state[name + ROWS], state[name + INDEX] = state.pop(name)[index], index
    raw = save({k: v.contiguous() for k, v in state.items()}, metadata={"format": "pt"})
    (to / "model.fp16.safetensors.gz").write_bytes(gzip.compress(raw, compresslevel=6))
    model.config.save_pretrained(str(to))
    from transformers import AutoTokenizer

    AutoTokenizer.from_pretrained(src).save_pretrained(str(to))
    return sum(f.stat().st_size for f in to.iterdir() if f.is_file())


def check_round_trip(src: str, packed: Path) -> float:
    """Largest difference between the original weights and the fp16 ones restored to float32 (what gpu_smoke.py
    --pack loads)."""
    import torch
    from safetensors.torch import load
    from transformers import AutoModel

    original = AutoModel.from_pretrained(src).state_dict()
    restored = load(gzip.decompress((packed / "model.fp16.safetensors.gz").read_bytes()))
    worst = 0.0
    for k, v in original.items():
        if k + INDEX in restored:  # a trimmed embedding: its kept rows
            v, got = v[restored[k + INDEX]], restored[k + ROWS]
        else:
            got = restored[k]
        if v.is_floating_point():
            worst = max(worst, float((got.to(torch.float32) - v).abs().max()))
    return worst


def download_wheels(to: Path) -> None:
    """Binary wheels of WHEELS, the versions installed here, for CPython 3.12 on manylinux x86-64."""
    to.mkdir(parents=True, exist_ok=True)
    plats = [a for p in PLATFORMS for a in ("--platform", p)]
    for name in WHEELS:
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
               "3.12", "--implementation", "cp", *plats, "-d", str(to), f"{name}=={version(name)}"]
        subprocess.run(cmd, check=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=None, help="default .gpu (smoke: a temporary folder)")
    ap.add_argument("--backbone", default=None, help="encoder folder to pack (default: the installed MiniLM)")
    ap.add_argument("--data-dir", default=os.environ.get("RUBRICTOOL_DATA", "../shared/datasets"))
    ap.add_argument("--smoke", action="store_true", help="pack --backbone and check the round trip; no download")
    ap.add_argument("--all-rows", action="store_true",
                    help="every row of the word embeddings (default: the rows the benchmark's texts use)")
    a = ap.parse_args(argv)
    if a.smoke and not a.backbone:
        sys.exit("--smoke needs --backbone (a small local encoder)")
    out = a.out or (Path(tempfile.mkdtemp(prefix="gpu-pack-")) if a.smoke else Path(".gpu"))
    from reccbm import default_backbone

    src = a.backbone or default_backbone()
    keep = None
    if not a.all_rows:
        keep = used_token_ids(src, SMOKE_TEXTS if a.smoke else benchmark_texts(a.data_dir))
        print(f"word embeddings: the {len(keep)} rows the benchmark's texts use")
    size = pack_backbone(src, out / "minilm", keep)
    worst = check_round_trip(src, out / "minilm")
    print(f"backbone {src}: {size / 2**20:.1f} MiB in fp16 (largest weight change restored to float32: {worst:.2g})")
    if not a.smoke:
        download_wheels(out / "wheels")
        with tarfile.open(out / "datasets.tgz", "w:gz") as tar:
            for name in ("mohler", "mohler-concepts"):
                tar.add(Path(a.data_dir) / name, arcname=f"datasets/{name}")
    (out / "RUN.txt").write_text(RUN.format(out=out))
    total = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(f"wrote {out}: {total / 2**20:.1f} MiB; on the GPU machine, from the repository root:\n{RUN.format(out=out)}")
    if total > 60 * 2**20:
        print("warning: more than 60 MiB: with the checkout it may not travel", file=sys.stderr)


if __name__ == "__main__":
    main()
