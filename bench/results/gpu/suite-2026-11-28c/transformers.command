python3 bench/transformer_bench.py --device cuda --size large --out bench/results/gpu/suite-2026-11-28c/transformers.csv 
