

def test_fix_rate_counts_only_the_codes_that_failed_before_the_debugger():
    from coral.benchmarks.metrics import fix_rate

    # two failing codes (one fixed), one passing code the debugger broke: that is a break, not a fix
    assert fix_rate([(False, True), (False, False), (True, False)]) == (0.5, 2)
    assert fix_rate([(True, True)]) == (0.0, 0)
    assert fix_rate([]) == (0.0, 0)
