"""``python -m icefloe.settings``: the configuration table of docs/configuration.md."""

from icefloe.settings.variables import reference_markdown

print(reference_markdown())
