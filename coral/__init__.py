"""coral: build, run, evaluate and train multi-agent LLM systems for code generation."""

__version__ = "0.1.0"
