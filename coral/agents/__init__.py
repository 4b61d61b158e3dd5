"""Agents: a role, a policy, a prompt template and an output parser."""

from coral.agents.agent import PROMPT_STYLES, ROLE_PARSERS, TEMPLATES, Agent, PromptTemplate, make_agent
from coral.agents.parsers import PARSERS, Parsed, extract_code, extract_plan, extract_text

__all__ = ["Agent", "PromptTemplate", "make_agent", "TEMPLATES", "PROMPT_STYLES", "ROLE_PARSERS", "PARSERS", "Parsed",
           "extract_code", "extract_plan", "extract_text"]
