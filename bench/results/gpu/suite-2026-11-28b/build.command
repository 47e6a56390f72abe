./scripts/bench.sh gpu-build 
