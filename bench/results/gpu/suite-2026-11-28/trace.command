PYTHONPATH=build-cuda/python python3 test/cuda/trace_peak.py densenet121; PYTHONPATH=build-cuda/python python3 test/cuda/trace_peak.py --autocast bfloat16 transformer_encoder
