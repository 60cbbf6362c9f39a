"""``python -m icefloe.settings``: the README's configuration table."""

from icefloe.settings.variables import reference_markdown

print(reference_markdown())
