"""Stand-in for ``xgrammar.structural_tag`` (see the package's docstring)."""

from xgrammar import _StandIn

_NAMES = (
    "AnyTextFormat AnyTokensFormat ConstStringFormat ExcludeTokenFormat Format "
    "JSONSchemaFormat OptionalFormat OrFormat RegexFormat SequenceFormat StarFormat "
    "TagFormat TagsWithSeparatorFormat TokenFormat TriggeredTagsFormat"
).split()
for _name in _NAMES:
    globals()[_name] = type(_name, (_StandIn,), {})
