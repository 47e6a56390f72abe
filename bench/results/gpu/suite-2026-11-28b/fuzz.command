python3 test/fuzz/fuzz.py --device cuda --seeds 0:40 
