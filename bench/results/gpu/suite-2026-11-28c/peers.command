python3 bench/peers.py --device cuda --models gpt --size large --rounds 2 --no-pair --limits 0.5 --sac full\,ops-half --compile-budgets 0.3 --out bench/results/gpu/suite-2026-11-28c/peers 
