#!/usr/bin/env bash
# The two set-up commands of README.md live here.
#   bash make.sh book   set up .venv if needed, run every chapter at the full profile, build the HTML book
#   bash make.sh test   set up .venv if needed, run every chapter at smoke + check + strict book build,
#                       then the test suite (pytest)
#   bash make.sh record smoke|full [CHAPTER...]
#                       re-record data/expected/<profile>/ after a deliberate change: every chapter under the
#                       native kernels and under every variant of kernels.SPREAD (avx2, scalar and the
#                       mixes zen4, aten-avx2), tolerances from their spread; WITH_RECORDED=1 keeps the
#                       replaced record (another host's spread) as one more variant
#   bash make.sh paper  on a CUDA machine: every chapter at the paper profile, recorded in data/expected/paper/
#   bash make.sh setup  only the set-up
#   bash make.sh lock   regenerate requirements.lock from pyproject.toml (pip-tools)
#   bash make.sh lint   ruff check and ruff format --check (also part of `test`)
# Needs only Python 3.11 and git; installs from the package registry alone.
set -euo pipefail
cd "$(dirname "$0")"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONHASHSEED=0
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
if ! "$PY" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null; then
  echo "make.sh: needs Python 3.11 (found: $("$PY" --version 2>&1 || echo "no $PY")); set PYTHON=/path/to/python3.11" >&2
  exit 2
fi
VENV=.venv
# the cores this process may use (its affinity mask, which respects cgroup and taskset limits); JOBS overrides
JOBS=${JOBS:-$("$PY" -c 'import os; print(len(os.sched_getaffinity(0)))')}

browser() {
  # Debian's chromium for the browser test of the built book (tests/test_html.py); needs root.
  if command -v chromium >/dev/null 2>&1; then return 0; fi
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "== installing Debian's chromium (browser test of the built HTML)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "== chromium is not installed and cannot be installed here (not root): the browser test will be skipped"
  fi
}

setup() {
  local stamp
  stamp=$(cat requirements.lock pyproject.toml make.sh | sha256sum | cut -c1-16)-${TORCH_INDEX:-}
  if [ -f "$VENV/.stamp" ] && [ "$(cat "$VENV/.stamp")" = "$stamp" ]; then return 0; fi
  echo "== setting up $VENV (torch==2.13.0 first, then every package pinned in requirements.lock)"
  "$PY" -m venv "$VENV"
  # torch first, on its own: from PyPI by default, or from the index TORCH_INDEX names (a CPU-only or a
  # CUDA build of the same release, e.g. https://download.pytorch.org/whl/cpu or .../whl/cu128)
  "$VENV/bin/python" -m pip install -q torch==2.13.0 ${TORCH_INDEX:+--index-url "$TORCH_INDEX"}
  "$VENV/bin/python" -m pip install -q -r requirements.lock
  # the package with its extras: pip checks pyproject.toml's ranges against the locked pins (nothing more to get)
  "$VENV/bin/python" -m pip install -q --no-deps -e ".[book,models,dist,test]"
  "$VENV/bin/python" -m pip check
  echo "$stamp" > "$VENV/.stamp"
}

lockcheck() {
  # what a user's pip resolves: the public index alone, this machine's pip configuration (a local wheel
  # folder, a constraints file) ignored. Fails on any pin the public index does not have.
  echo "== requirements.lock against the public index (pip --isolated --dry-run)"
  "$VENV/bin/python" -m pip install --isolated --dry-run --no-deps --ignore-installed -q -r requirements.lock
}

case "${1:-}" in
  setup) setup ;;
  lock)
    # regenerate requirements.lock from pyproject.toml and its extras (pip-tools, in a throwaway venv); torch is
    # held at the release make.sh installs (the CPU build on this machine)
    tmp=$(mktemp -d)
    "$PY" -m venv "$tmp/venv" && "$tmp/venv/bin/pip" install -q pip-tools
    echo "torch==2.13.0" > "$tmp/torch.txt"
    "$tmp/venv/bin/pip-compile" -q --extra book --extra models --extra dist --extra test --strip-extras --no-emit-index-url \
      --no-emit-find-links -c "$tmp/torch.txt" -o requirements.lock pyproject.toml
    sed -i -e "s|--constraint=$tmp/torch.txt|--constraint=<(torch==2.13.0)|" -e "s|-c $tmp/torch.txt|-c <(torch==2.13.0)|" requirements.lock
    # no local version label (this machine's wheel folder has 2.13.0+cpu; the public index has 2.13.0)
    sed -i -E 's/^([A-Za-z0-9_.-]+==[^+ ]+)\+[A-Za-z0-9.]+/\1/' requirements.lock
    rm -rf "$tmp"
    ;;
  lint) setup; "$VENV/bin/ruff" check lib tests bench && "$VENV/bin/ruff" format --check lib tests bench ;;
  book)
    setup
    "$VENV/bin/rcbook" book --profile full -j "$JOBS"
    "$VENV/bin/rcbook" check --profile full
    ;;
  lockcheck) setup; lockcheck ;;
  test)
    setup
    lockcheck
    browser
    "$VENV/bin/rcbook" book --profile smoke -j "$JOBS"
    "$VENV/bin/rcbook" check --profile smoke
    # another machine, simulated: every chapter again under other floating-point kernels, in its own build
    # root and store (build/kernels-<variant>/), checked against the same recorded results. Where ATen runs
    # AVX-512, the variant is one of the mixes real machines have (rankcollapse.book.kernels.MIXES), drawn by
    # the commit (RCBOOK_SECOND_KERNELS names one) among those the processor is not already (an AMD one is
    # zen4); elsewhere scalar (on an AVX2-only processor the AVX2
    # switches change nothing, and the second pass would be a copy of the first)
    second=${RCBOOK_SECOND_KERNELS:-$("$VENV/bin/python" -c "import torch, subprocess; \
from rankcollapse.book.machine import second_pass, cpu_vendor; \
head = subprocess.run(['git', 'rev-parse', 'HEAD'], capture_output=True, text=True).stdout.strip() or '0'; \
print(second_pass(torch.backends.cpu.get_cpu_capability(), int(head, 16), cpu_vendor()))")}
    echo "== second pass: every smoke chapter under the $second kernel variant"
    "$VENV/bin/rcbook" run all --profile smoke --kernels "$second" -j "$JOBS"
    "$VENV/bin/rcbook" check --profile smoke --kernels "$second"
    "$VENV/bin/ruff" check lib tests bench
    "$VENV/bin/ruff" format --check lib tests bench
    "$VENV/bin/python" -m pytest -q tests
    ;;
  record)
    setup
    prof=${2:?usage: bash make.sh record smoke|full [CHAPTER...]}
    shift 2
    chapters=("$@")
    spread=$("$VENV/bin/python" -c "from rankcollapse.book.kernels import SPREAD; print(' '.join(SPREAD))")
    for k in native $spread; do
      echo "== $prof under the $k kernels"
      if [ ${#chapters[@]} -eq 0 ]; then
        "$VENV/bin/rcbook" run all --profile "$prof" --kernels "$k" -j "$JOBS"
      else
        for c in "${chapters[@]}"; do "$VENV/bin/rcbook" run "$c" --profile "$prof" --kernels "$k"; done
      fi
    done
    # WITH_RECORDED=1: the record being replaced (another host's spread) widens what it measured the same way
    "$VENV/bin/rcbook" record --profile "$prof" --spread "${spread// /,}" ${WITH_RECORDED:+--with-recorded} \
      "${chapters[@]}"
    ;;
  paper)
    setup
    "$VENV/bin/rcbook" run all --profile paper --device cuda
    "$VENV/bin/rcbook" record --profile paper
    "$VENV/bin/rcbook" book --profile paper --device cuda
    ;;
  *) echo "usage: bash make.sh book|test|record PROFILE|paper|setup" >&2; exit 2 ;;
esac
