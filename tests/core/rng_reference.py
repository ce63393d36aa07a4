#!/usr/bin/env python3
"""Independent reference for attn::Rng (include/attn/core/rng.hpp).

Re-implements, from the published algorithms and not from attn's code, the seeding
(the splitmix64 sequence started at the seed, Steele, Lea & Flood 2014) and the
xoshiro256** 1.0 generator (Blackman & Vigna, https://prng.di.unimi.it/xoshiro256starstar.c),
and prints the first draws for a few seeds. tests/core/test_rng.cpp holds these numbers as
golden constants: if attn's stream ever changes (on any compiler or platform), that test fails.
The seed-0 words also match other independent xoshiro256** implementations seeded this way.

Run: python3 tests/core/rng_reference.py
"""

import math

MASK = (1 << 64) - 1
GOLDEN_GAMMA = 0x9E3779B97F4A7C15


def splitmix64_next(state):
    """One step of splitmix64: returns (new_state, output)."""
    state = (state + GOLDEN_GAMMA) & MASK
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return state, z ^ (z >> 31)


def rotl(x, k):
    return ((x << k) | (x >> (64 - k))) & MASK


class Xoshiro256StarStar:
    def __init__(self, seed):
        sm = seed & MASK
        self.s = []
        for _ in range(4):
            sm, out = splitmix64_next(sm)
            self.s.append(out)

    def next_u64(self):
        s = self.s
        result = (rotl((s[1] * 5) & MASK, 7) * 9) & MASK
        t = (s[1] << 17) & MASK
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
        return result


def unit_double(bits):
    """The top 53 bits as a double in [0, 1), exactly as attn::bits_to_unit_double."""
    return (bits >> 11) * 2.0**-53


def hash_uniform(seed, counter):
    """attn::hash_uniform: splitmix64(splitmix64(seed) ^ counter * 0xD1B54A32D192ED03)."""
    def mix(x):  # the splitmix64 function: one step from state x
        return splitmix64_next(x)[1]

    return unit_double(mix(mix(seed) ^ ((counter * 0xD1B54A32D192ED03) & MASK)))


def normal_pair(rng):
    """attn::Rng::normal's Box-Muller pair: (r cos(2 pi u2), r sin(2 pi u2)), r = sqrt(-2 log u1)."""
    u1 = unit_double(rng.next_u64())
    while u1 <= 0.0:
        u1 = unit_double(rng.next_u64())
    u2 = unit_double(rng.next_u64())
    r = math.sqrt(-2.0 * math.log(u1))
    return r * math.cos(2.0 * math.pi * u2), r * math.sin(2.0 * math.pi * u2)


def main():
    for seed in (0, 42):
        rng = Xoshiro256StarStar(seed)
        words = ", ".join(f"0x{rng.next_u64():016X}ull" for _ in range(6))
        print(f"seed {seed}: next_u64 = {{{words}}}")
    rng = Xoshiro256StarStar(0)
    print("seed 0: uniform =", ", ".join(repr(unit_double(rng.next_u64())) for _ in range(3)))
    rng = Xoshiro256StarStar(0)
    print("seed 0: normal =", ", ".join(repr(v) for v in normal_pair(rng) + normal_pair(rng)))
    print("hash_uniform(7, 0..2) =", ", ".join(repr(hash_uniform(7, c)) for c in range(3)))


if __name__ == "__main__":
    main()
