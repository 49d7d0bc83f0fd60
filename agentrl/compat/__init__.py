"""Other stacks' formats read into agentrl's own (one subpackage per stack, e.g. `verl`).

Why apart from `agentrl.config`: a translator grows with the stack it follows (verl's tree has
~550 leaves); the config package stays the schema and its loader, and depends on no importer.
"""
