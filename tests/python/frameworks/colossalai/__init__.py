"""A stand-in for ColossalAI (0.4.9 to 0.5.1, main 4f9953b) that makes its
checks on what remat's export passes and evaluates its policies' rules. Not
ColossalAI: see tests/python/frameworks/README.md."""
