python3 test/cuda/check_families.py --device cuda --out bench/results/gpu/suite-2026-11-28b/families.json 
