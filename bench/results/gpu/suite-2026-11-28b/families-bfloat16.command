python3 test/cuda/check_families.py --device cuda --autocast bfloat16 --out bench/results/gpu/suite-2026-11-28b/families-bfloat16.json 
