python3 test/cuda/trace_peak.py densenet121 
