"""Task synthesis (ToolOrchestra's ToolScale pipeline): `template` mode offline and seeded, `teacher` mode
through any OpenAI-compatible endpoint. template.py = the embedded default's QA families; stages.py = the
domain -> DB -> tools -> tasks -> evolve stages; validation.py = the checks every synthesized item passes;
teacher.py = the LLM-driven mode. Writing files and progress bars are cluster/synth.py's job.
"""
