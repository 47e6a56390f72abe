python3 bench/user_story.py --device cuda --seconds 20 --peers full\,ops-half --compile-budgets '' --out bench/results/gpu/suite-2026-11-28b/user-story.json 
