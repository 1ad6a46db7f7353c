#!/usr/bin/env bash
# Issue 19: each defect, run with a build from before the fixes (OLD) and the current one (NEW);
# one line per defect and build: exit status and the error line (else the last line of output).
#
#   git archive 73b0e53 | tar -x -C /tmp/old && (cd /tmp/old && CARGO_TARGET_DIR=/tmp/old-target cargo build --release --bin octet)
#   OLD=/tmp/old-target/release/octet bash bench/hardening/defects.sh > bench/results/hardening_before_after.txt
set -u
here=$(cd "$(dirname "$0")" && pwd)
OLD=${OLD:?a build from before the fixes}
NEW=${NEW:-$here/../../target/release/octet}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
cd "$work"
python3 "$here/mk_o8.py" "$work" "$here/../../runtime/fuzz/corpus/parse/lenet.o8"
$NEW train --data synthetic:64:16 --epochs 3 --stop-after 1 --batch-size 32 --out base --json >/dev/null 2>&1
python3 - <<'PY'
import json,struct
b=open('base/last.safetensors','rb').read()
n=struct.unpack('<Q',b[:8])[0]; h=json.loads(b[8:8+n]); data=bytearray(b[8+n:])
def save(name,hh,dd):
    hb=json.dumps(hh).encode()
    while len(hb)%8: hb+=b' '
    open(name,'wb').write(struct.pack('<Q',len(hb))+hb+bytes(dd))
m=json.loads(h['__metadata__']['octet'])
def meta(name, f):
    mm=json.loads(json.dumps(m)); f(mm); hh=json.loads(json.dumps(h)); hh['__metadata__']['octet']=json.dumps(mm); save(name,hh,data)
meta('std0.safetensors', lambda mm: mm['normalization'].__setitem__('std',[0.0,0.2,0.2]))
meta('empty.safetensors', lambda mm: mm.__setitem__('normalization',{'mean':[],'std':[]}))
meta('other.safetensors', lambda mm: mm.__setitem__('model','resnet18'))
meta('far.safetensors', lambda mm: mm.__setitem__('epoch',1000000))
d=bytearray(data); o=h['conv1.weight']['data_offsets'][0]; d[o:o+4]=struct.pack('<f',float('nan')); save('nan.safetensors',h,d)
PY
printf 'OCTET' > short.o8; touch afile
mkdir -p fm stale; cp $here/../../data/fashion-mnist-subset/*.gz fm/; printf 'garbage' >> fm/t10k-labels-idx1-ubyte.gz
T="--data synthetic:64:16 --epochs 2 --batch-size 32"
run() { # name, args...
  local name=$1; shift
  for B in OLD NEW; do
    local bin=${!B}; rm -rf r; [ "$name" = 3-stale-tmp ] && { mkdir -p stale; echo x > stale/last.safetensors.999999999.tmp; }
    out=$(ulimit -v 4194304; timeout 120 $bin "$@" 2>&1); rc=$?  # 4 GiB of address space
    extra=""; [ "$name" = 3-stale-tmp ] && extra=" tmp-left=$(ls stale | grep -c 999999999)"
    printf '%-22s %s rc=%-3s%s %s\n' "$name" $B $rc "$extra" "$( (echo "$out" | grep -m1 -E '^error|memory allocation|panicked' || echo "$out" | grep -v '^\s*$' | tail -1) | cut -c1-150)"
  done
}
run 1-huge-arena       run huge.o8 --data bundled --images 64 --threads 2
run 1-arena-ffffffff   inspect ffff.o8
run 2-gamma-inf        train $T --schedule step --gamma inf --out r
run 2-gamma-nan        train $T --schedule step --step-every 1 --gamma nan --out r
run 3-stale-tmp        train $T --stop-after 1 --out stale
run 4-nan-eval         eval nan.safetensors
run 4-nan-resume       train --resume nan.safetensors --out r
run 5-std0-eval        eval std0.safetensors
run 5-empty-norm-eval  eval empty.safetensors
run 6-out-is-file      train $T --out afile
run 7-threads-0        run lenet.o8 --data bundled --images 8 --threads 0
run 7-calib-images-0   export base/last.safetensors --calibration-images 0 --out r/x.o8 --no-plots --test-images 16
run 7-stop-after-0     train $T --stop-after 0 --out r
run 7-resume-1e6       train --resume far.safetensors --epochs 9 --out r
run 7-os-error-twice   eval /nonexistent/x.safetensors
run 7-short-o8         inspect short.o8
run 7-model-mismatch   train --resume other.safetensors --out r
run 7-gzip-trailing    run lenet.o8 --data fashion-mnist:$work/fm --images 8
run 7-step-every-0     train $T --schedule step --step-every 0 --out r
run 7-eval-batch-0     eval base/last.safetensors --batch-size 0
