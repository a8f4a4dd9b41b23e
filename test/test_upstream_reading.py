"""How the plugin reads SGLang's compiled code (``upstream``): the names a function
uses and the string constants it holds, nested code included. ``compat`` decides a
gate is native from these; the 0.5.16 pool-gate road reads the constants."""

from __future__ import annotations

from sglang_pd_lean.upstream import code_names, code_strings, constants_of, names_of


def _marker_as_parameter(is_prefill_only_server):
    return is_prefill_only_server


def _marker_as_local(server_args):
    is_prefill_only_server = server_args.disaggregation_mode
    return is_prefill_only_server


def _tuple_of_modes(mode):
    return mode in ("prefill", "decode")


def _in_a_comment_or_string():
    # is_prefill_only_server
    return "is_prefill_only_server is a word here"


def test_a_marker_used_only_as_a_parameter_or_local_name_is_a_used_name():
    """A native marker SGLang's code binds as a parameter or a local variable (a
    release that reads the role into a local before asking it) counts as used."""
    assert "is_prefill_only_server" in code_names(_marker_as_parameter.__code__)
    assert "is_prefill_only_server" in code_names(_marker_as_local.__code__)


def test_a_marker_only_in_a_comment_or_a_string_is_not_a_used_name():
    assert "is_prefill_only_server" not in code_names(_in_a_comment_or_string.__code__)


def test_a_tuple_of_string_constants_gives_each_string():
    """``x in ("a", "b")`` compiles to one constant tuple: each string in it is a
    constant of the code, as the 0.5.16 pool-gate road reads them."""
    assert {"prefill", "decode"} <= code_strings(_tuple_of_modes.__code__)
    target = f"{__name__}._tuple_of_modes"
    assert {"prefill", "decode"} <= constants_of(target)
    assert "mode" in names_of(target)


def test_a_target_that_does_not_resolve_has_no_names_or_constants():
    assert constants_of(f"{__name__}.no_such_function") == frozenset()
    assert names_of("no_such_module_here.function") == frozenset()
