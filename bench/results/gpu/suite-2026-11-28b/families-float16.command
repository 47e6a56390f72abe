python3 test/cuda/check_families.py --device cuda --autocast float16 --out bench/results/gpu/suite-2026-11-28b/families-float16.json 
