python3 bench/host_overhead.py --device cuda --profile bench/results/gpu/suite-2026-11-28b/profile --rounds 3 resnet1001:224:2 densenet121:500:8 
