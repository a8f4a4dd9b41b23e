"""Stand-in for xgrammar, for the GPU check only (scripts/gpu_lean_check.py).

SGLang 0.5.17 imports xgrammar's names at module level in its function-call parsers,
which ``ServerArgs`` imports; nothing the GPU check runs (pools, configurator, sizing,
graph setup, warm-up) calls them. xgrammar 0.2.1's wheel is 44.7 MB, which does not
fit the 64 MiB that travels to a GPU host, and those hosts reach no registry: where
no real xgrammar imports, ``scripts/gpu_carry.py`` puts this folder on the path.
Every name is a class that refuses to be used; as a pydantic field type it
validates as ``Any``, as SGLang's OpenAI protocol types it where xgrammar is absent.
"""


class _StandIn:
    def __init__(self, *args, **kwargs):
        raise RuntimeError(
            f"xgrammar stand-in (test/gpu_site): {type(self).__name__} is not available"
        )

    @classmethod
    def model_validate(cls, *args, **kwargs):
        cls()

    @classmethod
    def __get_pydantic_core_schema__(cls, source, handler):
        from pydantic_core import core_schema

        return core_schema.any_schema()


class StructuralTag(_StandIn):
    pass


def get_model_structural_tag(*args, **kwargs):
    raise RuntimeError("xgrammar stand-in (test/gpu_site): no structural tags")


__version__ = "0+stand-in"
STAND_IN = True
