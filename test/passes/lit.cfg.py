import lit.formats

config.name = "jitckpt-passes"
config.test_format = lit.formats.ShTest(True)
config.suffixes = [".test", ".ir"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.jitckpt_binary_dir, "test", "passes")
config.substitutions.append(("%jitckpt-opt", config.jitckpt_opt))
config.substitutions.append(("%python", config.python))
config.substitutions.append(("%models", os.path.join(os.path.dirname(__file__), "models.py")))
config.substitutions.append(("FileCheck", config.filecheck))
