"""Validation tools for a running OpenAI-compatible server (docs/DESIGN.md §14).

``verify`` (functional checks), ``bench`` (TTFT and decode throughput), ``soak`` (stability over
many turns). Each takes an ``OpenAIClient`` (``club3090.edges.openai_client``: the injectable
transport and clock live there) and returns a report value; the commands in
``club3090.cli.commands`` render it. Every loop is bounded in count and time.
"""
