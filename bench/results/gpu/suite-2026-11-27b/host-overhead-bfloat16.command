python3 bench/host_overhead.py --device cuda --autocast bfloat16 resnet1001:224:2 densenet121:500:8 
