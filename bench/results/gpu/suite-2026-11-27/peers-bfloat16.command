python3 bench/peers.py --device cuda --autocast bfloat16 --models gpt --size large --rounds 3 --limits 0.5 --sac full\,ops-half --compile-budgets 0.3 --out bench/results/gpu/suite-2026-11-27/peers 
