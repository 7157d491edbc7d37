"""Tango's score bounds of a paired drop, computed independently of npu-audit.

The restricted maximum-likelihood estimate of the `fixed` cell is found by numerical maximisation
of the multinomial likelihood (scipy.optimize.minimize_scalar), not by the closed form the tool
uses, and each bound by scipy.optimize.brentq on the score statistic. Prints one line per case:

    broken fixed n  estimate  lo95 hi95  lo90 hi90   (points)

    tango_check.py [BROKEN,FIXED,N ...]

    tango_check.py power N BROKEN_RATE FIXED_RATE LIMIT
        The exact probability that N pairs show the drop within LIMIT (a fraction): the
        one-sided 95% upper bound at or under it, summed over the trinomial distribution of the
        broken and fixed counts. Prints the probability.
"""

import math
import sys

from scipy.optimize import brentq, minimize_scalar
from scipy.stats import norm


def restricted_fixed(b, f, n, d):
    """argmax over q of b log(q + d) + f log q + (n - b - f) log(1 - 2q - d)."""
    rest = n - b - f
    lo, hi = max(0.0, -d), (1.0 - d) / 2.0
    if hi - lo < 1e-15:
        return lo

    def nll(q):
        terms = 0.0
        for count, p in ((b, q + d), (f, q), (rest, 1.0 - 2.0 * q - d)):
            if count > 0:
                if p <= 0.0:
                    return math.inf
                terms += count * math.log(p)
        return -terms

    r = minimize_scalar(nll, bounds=(lo, hi), method="bounded", options={"xatol": 1e-14, "maxiter": 2000})
    # The maximum may sit on the edge of the range (a cell with no pairs), where the bounded
    # search only approaches it.
    return min((r.x, lo, hi), key=nll)


def score(b, f, n, d):
    q = restricted_fixed(b, f, n, d)
    return (b - f - n * d) / math.sqrt(n * (2.0 * q + d * (1.0 - d)))


def bound(b, f, n, z, upper):
    est = (b - f) / n
    eps = 1e-12
    if upper:
        if est >= 1.0 - eps:
            return 1.0
        return brentq(lambda d: score(b, f, n, d) + z, est + eps, 1.0 - eps, xtol=1e-15)
    if est <= -1.0 + eps:
        return -1.0
    return brentq(lambda d: score(b, f, n, d) - z, -1.0 + eps, est - eps, xtol=1e-15)


def power(n, broken, fixed, limit):
    from scipy.stats import binom

    z90 = norm.ppf(0.95)
    total = 0.0
    top = min(n, int(n * broken + 12 * math.sqrt(n * broken + 1) + 20))
    for b in range(top + 1):
        pb = binom.pmf(b, n, broken)
        if pb < 1e-15:
            continue
        q = fixed / (1.0 - broken) if broken < 1.0 else 0.0
        # The bound falls as fixed pairs rise: the fewest fixed pairs that show the limit.
        lo, hi = 0, min(n - b, int(n * fixed + 12 * math.sqrt(n * fixed + 1) + 40))
        if bound(b, hi, n, z90, True) > limit:
            continue
        while lo < hi:
            mid = (lo + hi) // 2
            if bound(b, mid, n, z90, True) <= limit:
                hi = mid
            else:
                lo = mid + 1
        total += pb * binom.sf(lo - 1, n - b, q)
    return total


def main():
    if sys.argv[1:2] == ["power"]:
        n, broken, fixed, limit = int(sys.argv[2]), *(float(x) for x in sys.argv[3:6])
        print(f"{power(n, broken, fixed, limit):.6f}")
        return
    cases = [tuple(int(x) for x in a.split(",")) for a in sys.argv[1:]] or [
        (0, 0, 4), (0, 0, 20), (0, 0, 300), (11, 12, 200), (7, 1, 21)]
    z95, z90 = norm.ppf(0.975), norm.ppf(0.95)
    for b, f, n in cases:
        figures = [100 * (b - f) / n] + [100 * bound(b, f, n, z, up) for z in (z95, z90) for up in (False, True)]
        print(b, f, n, " ".join(f"{x:.12f}" for x in figures))


if __name__ == "__main__":
    main()
