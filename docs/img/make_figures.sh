#!/usr/bin/env bash
# The README's figures (docs/img/*.png), each from a real run of a flow that takes under a minute on 2 quiet CPU
# cores once the venv, the embedding cache (artifacts/cache/embeddings) and the discriminator checkpoint are in
# place. The runs write to a temporary folder; the PNGs are copied here with a 64-colour palette (small files).
#     bash docs/img/make_figures.sh            # from the repository root
set -euo pipefail
PY=${PY:-.venv/bin/python}
CHECKPOINT=${CHECKPOINT:-artifacts/discriminator/minilm/best}
RUN=$(mktemp -d)
trap 'rm -rf "$RUN"' EXIT

small() {  # small SRC DEST: palette PNG, so the repository stays light
    "$PY" -c "import sys; from PIL import Image; Image.open(sys.argv[1]).convert('RGB').quantize(64).save(sys.argv[2], optimize=True)" "$1" "$2"
}

# build-graph on the three gold-edge benchmarks of ../shared/data (no discriminator): candidate_recall.png
"$PY" -m flows.build_graph --toolset apibank --toolset tmdb --toolset ultratool --no-discriminator \
    --warehouse "$RUN/warehouse/tgr.duckdb"
small "$RUN/warehouse/candidate_recall.png" docs/img/candidate-recall.png

# eval-retrieval on API-Bank from that warehouse (Table 2 only): retrieval.png
"$PY" -m flows.eval_retrieval --warehouse "$RUN/warehouse/tgr.duckdb" --dataset apibank --no-rerank \
    --out-dir "$RUN/eval"
small "$RUN/eval/retrieval.png" docs/img/retrieval-apibank.png

# train-discriminator, evaluate only: the checkpoint on API-Bank's pairs, precision_recall.png
if [ -f "$CHECKPOINT/config.json" ]; then
    "$PY" -m flows.train_discriminator --checkpoint "$CHECKPOINT" --test apibank --output "$RUN/discriminator"
    small "$RUN/discriminator/precision_recall.png" docs/img/precision-recall-apibank.png
else
    echo "no checkpoint at $CHECKPOINT (make train-discriminator): precision-recall figure not redrawn" >&2
fi

# mine-tdi on a seeded sample of 400 files of this interpreter's standard library: mix.png
"$PY" -m flows.mine_tdi --source stdlib --limit-files 400 --output-root "$RUN/tdi" --dataset stdlib-400
small "$RUN/tdi/stdlib-400/mix.png" docs/img/mix-stdlib-400.png
ls -l docs/img/*.png
