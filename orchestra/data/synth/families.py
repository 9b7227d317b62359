"""Offline problem generators for the template task families: arith, lookup, reasoning, code.

Each generator takes a `random.Random` and a difficulty (1..3) and returns a `Problem`: short text
(< 200 chars), gold answer, plausible wrong answers, and for arith/code a Python snippet that prints the
answer. Surface forms differ per family on purpose (arith: a person and objects, or a bare expression; lookup:
"Who/Where/Which", reasoning: "Puzzle:", code: "Code:") so a tiny policy can learn routing from the text.
Half the arith problems are bare expressions ("What is 17 * 23?", "Compute 45+12*3.", "84 / 7 = ?") asked in one of
EXPR_FORMS' phrasings: people ask arithmetic that way, and a policy that only ever saw word problems routed such a
question as it routes lookups (to search; issue 48). Their difficulty is the number of operations.
The `lookup` family asks multi-hop questions over a seeded synthetic `World` of invented entities; its
facts are the retrieval corpus. Splitting, ids, preferences and tool catalogues are template.py's job.
"""

from __future__ import annotations

import ast
import itertools
import operator
import random
from dataclasses import dataclass, field

NAMES = ["Ana", "Ben", "Cleo", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jun", "Kai", "Lena", "Milo", "Nia",
         "Omar", "Pia", "Quin", "Rosa", "Sam", "Tara", "Umi", "Vik", "Wren", "Yara", "Zed"]
ITEMS = ["apples", "pencils", "stamps", "marbles", "cookies", "stickers", "shells", "coins", "books", "cards"]
SYL = ["vel", "mor", "tra", "quess", "dar", "zen", "lio", "bran", "kel", "sor", "thal", "vin", "ost", "pry",
       "gal", "rum", "fen", "cai", "dro", "wex", "nal", "ish", "bor", "yat"]


@dataclass
class Problem:
    problem: str
    answer: str
    distractors: list[str]
    code: str = ""
    doc_ids: list[str] = field(default_factory=list)
    kind: str = ""  # sub-template name, for analysis


def _distinct(answer: str, candidates: list, k: int = 3) -> list[str]:
    out: list[str] = []
    for c in candidates:
        s = str(c)
        if s != answer and s not in out:
            out.append(s)
    return out[:k]


# ---------------------------------------------------------------- arith
# How people ask for a computation: lower case, no question mark, a bare expression, the Unicode times sign
# (tools/calculator.py reads every one of them, so a served question phrased so is computable)
EXPR_FORMS = ("What is {e}?", "What's {e}?", "what is {e}", "Compute {e}.", "Calculate {e}.", "Evaluate {e}.",
              "How much is {e}?", "{e} = ?", "{e}", "Work out {e}.", "Please calculate {e}.", "What does {e} equal?",
              "Find the value of {e}.", "Can you compute {e}?", "calculate {e}", "Quick question: what is {e}?")
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv}


def _value(node: ast.AST) -> int:
    """The value of an expression this module wrote (integers, + - * //): no eval."""
    if isinstance(node, ast.Expression):
        return _value(node.body)
    if isinstance(node, ast.Constant):
        return int(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_value(node.left), _value(node.right))
    raise ValueError(f"not a generated expression: {ast.dump(node)}")


def expression(rng: random.Random, difficulty: int) -> Problem:
    """A bare expression of `difficulty` operations in one of EXPR_FORMS; exact integer division only alone
    ("84 / 7"), so every answer is an integer and the printed program (`//`) prints it."""
    ops = [rng.choice("+-*") for _ in range(difficulty)]
    if difficulty == 1 and rng.random() < 0.2:
        q, d = rng.randint(2, 60), rng.randint(2, 19)
        python, text = f"{q * d} // {d}", f"{q * d} / {d}"
    else:
        # factors up to 99, other terms up to 999 (the first term sized for the first operation)
        terms = [str(rng.randint(2, 99) if op == "*" else rng.randint(10, 999)) for op in ops[:1] + ops]
        python = f"{terms[0]} {ops[0]} {terms[1]}"
        if difficulty > 1 and rng.random() < 0.4:
            python = f"({python})"  # the first operation bracketed: another value when a * follows
        for op, term in zip(ops[1:], terms[2:], strict=True):
            python = f"{python} {op} {term}"
        text = python
    value = _value(ast.parse(python, mode="eval"))
    if rng.random() < 0.3:
        text = text.replace(" ", "")
    if rng.random() < 0.1:
        text = text.replace("*", "×")
    answer = str(value)
    unbracketed = _value(ast.parse(python.replace("(", "").replace(")", ""), mode="eval"))  # a precedence slip
    return Problem(rng.choice(EXPR_FORMS).format(e=text), answer,
                   _distinct(answer, [value + 1, value - 1, value + 10, unbracketed, value * 2]),
                   code=f"print({python})", kind=f"expr{difficulty}")


def arith(rng: random.Random, difficulty: int) -> Problem:
    """A bare expression (half the time) or a multi-step word problem; difficulty = number of operations (after
    the first product, in a word problem)."""
    if rng.random() < 0.5:
        return expression(rng, difficulty)
    who, item = rng.choice(NAMES), rng.choice(ITEMS)
    boxes, per = rng.randint(2, 9), rng.randint(3, 15)
    total = boxes * per
    text = f"{who} has {boxes} boxes of {per} {item}"
    expr = f"{boxes}*{per}"
    partials = [total]
    if difficulty >= 2:
        gain = rng.randint(2, 30)
        total += gain
        expr = f"({expr}+{gain})"
        text += f", buys {gain} more"
        partials.append(total)
    give = rng.randint(1, max(1, total // 2))
    total -= give
    expr = f"{expr}-{give}"
    text += f" and gives away {give}"
    partials.append(total)
    if difficulty >= 3:
        friends = rng.choice([d for d in range(2, 6)])
        total -= total % friends  # keep the share whole: the rest is eaten first
        expr = f"(({expr})-({expr})%{friends})//{friends}"
        total //= friends
        text += f", eats the leftover that won't split evenly, and shares the rest among {friends} friends"
        question = " How many does each friend get?"
    else:
        question = f" How many {item} are left?"
    answer = str(total)
    code = f"print({expr})"
    return Problem(text + "." + question, answer,
                   _distinct(answer, [total + 1, total - 1, *partials, total * 2]), code=code, kind="boxes")


# ---------------------------------------------------------------- lookup (multi-hop over a synthetic world)
WORK_KINDS = [("bridge", "designed"), ("novel", "written"), ("company", "founded"), ("opera", "composed")]
ACTIVE = {"bridge": "designed", "novel": "wrote", "company": "founded", "opera": "composed"}


class World:
    """Invented countries, cities, people and works; every fact is one short corpus passage."""

    def __init__(self, seed: int, n_countries: int = 10, n_cities: int = 40, n_people: int = 120,
                 n_works: int = 160):
        rng = random.Random(f"world:{seed}")
        used: set[str] = set()

        def name(parts: int) -> str:
            while True:
                word = "".join(rng.choice(SYL) for _ in range(parts)).capitalize()
                if word not in used:
                    used.add(word)
                    return word

        self.countries = [name(3) + "ia" for _ in range(n_countries)]
        self.city_country = {name(2) + rng.choice(["port", "ford", "holm", "ville"]): rng.choice(self.countries)
                             for _ in range(n_cities)}
        cities = list(self.city_country)
        self.person_city = {f"{name(2)} {name(2)}": rng.choice(cities) for _ in range(n_people)}
        self.person_year = {p: rng.randint(1800, 1990) for p in self.person_city}
        people = list(self.person_city)
        self.works: dict[str, tuple[str, str]] = {}  # work title -> (kind, creator)
        for _ in range(n_works):
            kind, _verb = rng.choice(WORK_KINDS)
            self.works[f"The {name(2)} {kind}"] = (kind, rng.choice(people))
        self.by_hops: dict[int, list] = {1: [], 2: [], 3: []}
        for q in self.questions():
            self.by_hops[q[0]].append(q)

    @staticmethod
    def doc_id(title: str) -> str:
        return "w:" + title.lower().replace(" ", "-")

    def passages(self) -> list[dict[str, str]]:
        out = [{"id": self.doc_id(c), "title": c, "text": f"{c} is a country with its own language and coins."}
               for c in self.countries]
        out += [{"id": self.doc_id(c), "title": c, "text": f"{c} is a city in the country of {k}."}
                for c, k in self.city_country.items()]
        out += [{"id": self.doc_id(p), "title": p,
                 "text": f"{p} was born in {self.person_year[p]} in the city of {c}."}
                for p, c in self.person_city.items()]
        for w, (kind, who) in self.works.items():
            verb = dict(WORK_KINDS)[kind]
            out.append({"id": self.doc_id(w), "title": w, "text": f"{w} is a {kind} {verb} by {who}."})
        return out

    def questions(self) -> list[tuple[int, str, str, list[str], list[str]]]:
        """Every askable question: (hops, text, answer, gold doc ids, distractor pool)."""
        people, cities = list(self.person_city), list(self.city_country)
        out = []
        for w, (kind, who) in self.works.items():
            verb = ACTIVE[kind]
            city = self.person_city[who]
            country = self.city_country[city]
            ids = [self.doc_id(w), self.doc_id(who)]
            out.append((1, f"Who {verb} {w}?", who, ids[:1], people))
            out.append((2, f"In which city was the person who {verb} {w} born?", city, ids, cities))
            out.append((3, f"Which country is the birthplace city of whoever {verb} {w} in?", country,
                        ids + [self.doc_id(city)], self.countries))
            out.append((2, f"In what year was the person who {verb} {w} born?", str(self.person_year[who]), ids,
                        [str(y) for y in range(1800, 1991, 7)]))
        for p, city in self.person_city.items():
            out.append((1, f"Where was {p} born?", city, [self.doc_id(p)], cities))
            out.append((2, f"Which country was {p} born in?", self.city_country[city],
                        [self.doc_id(p), self.doc_id(city)], self.countries))
        return out


def lookup(rng: random.Random, difficulty: int, world: World) -> Problem:
    """difficulty = number of passages to chain (hops)."""
    hops, text, answer, ids, pool = rng.choice(world.by_hops[difficulty])
    return Problem(text, answer, _distinct(answer, rng.sample(pool, min(6, len(pool)))), doc_ids=list(ids),
                   kind=f"hop{hops}")


# ---------------------------------------------------------------- reasoning (puzzles)
def _ordering(rng: random.Random, n: int) -> Problem:
    people = rng.sample(NAMES, n)  # people[0] is the oldest
    pairs = [(people[i], people[i + 1]) for i in range(n - 1)]
    rng.shuffle(pairs)
    facts = " ".join(f"{a} is older than {b}." if rng.random() < 0.5 else f"{b} is younger than {a}."
                     for a, b in pairs)
    if rng.random() < 0.5:
        q, answer = "Who is the youngest?", people[-1]
    else:
        q, answer = "Who is the oldest?", people[0]
    return Problem(f"Puzzle: {facts} {q}", answer, _distinct(answer, people), kind="ordering")


def _knights(rng: random.Random, n: int) -> Problem:
    """Knights always tell the truth, knaves always lie; exactly one knight, found by brute force."""
    people = rng.sample(NAMES, n)
    for _ in range(10_000):  # a few dozen draws suffice in practice; the cap only guards against a bug
        claims = []
        for i, p in enumerate(people):
            j = rng.choice([k for k in range(n) if k != i])
            if rng.random() < 0.5:
                claims.append((p, f"{people[j]} is a knave", lambda w, j=j: not w[j]))
            else:
                k = rng.choice([m for m in range(n) if m != j])
                claims.append((p, f"{people[j]} and {people[k]} differ",
                               lambda w, j=j, k=k: w[j] != w[k]))
        worlds = [w for w in itertools.product([True, False], repeat=n)
                  if all(w[i] == claim(w) for i, (_, _, claim) in enumerate(claims))]
        if len(worlds) == 1 and sum(worlds[0]) == 1:
            answer = people[worlds[0].index(True)]
            said = " ".join(f"{p}: '{c}'." for p, c, _ in claims)
            return Problem(f"Puzzle: knights tell truth, knaves lie. {said} Who is the one knight?", answer,
                           _distinct(answer, people), kind="knights")
    raise RuntimeError(f"no single-knight puzzle found for {n} people")


def reasoning(rng: random.Random, difficulty: int) -> Problem:
    if difficulty == 1:
        return _ordering(rng, 4)
    if difficulty == 2:
        return _ordering(rng, 5) if rng.random() < 0.5 else _knights(rng, 2)
    return _knights(rng, 3)


# ---------------------------------------------------------------- code
def _primes_below(n: int) -> int:
    return sum(1 for k in range(2, n) if all(k % d for d in range(2, int(k**0.5) + 1)))


def code(rng: random.Random, difficulty: int) -> Problem:
    scale = {1: 1, 2: 10, 3: 100}[difficulty]
    kind = rng.choice(["squares", "primes", "fib", "digits", "collatz"])
    if kind == "squares":
        n = rng.randint(5, 20) * scale
        ans, snippet = sum(i * i for i in range(1, n + 1)), f"print(sum(i*i for i in range(1, {n}+1)))"
        text = f"Code: compute the sum of i*i for i from 1 to {n}."
    elif kind == "primes":
        n = rng.randint(20, 90) * scale
        ans = _primes_below(n)
        snippet = (f"print(sum(1 for k in range(2, {n}) "
                   f"if all(k % d for d in range(2, int(k**0.5) + 1))))")
        text = f"Code: write a program that counts the primes below {n}."
    elif kind == "fib":
        n = rng.randint(8, 20) + 10 * (difficulty - 1)
        a, b = 0, 1
        for _ in range(n):
            a, b = b, a + b
        ans, snippet = a, f"a, b = 0, 1\nfor _ in range({n}):\n    a, b = b, a + b\nprint(a)"
        text = f"Code: compute Fibonacci number F({n}) with F(0)=0, F(1)=1."
    elif kind == "digits":
        n = rng.randint(10**(2 + difficulty), 10**(3 + difficulty))
        p = difficulty + 1
        ans = sum(int(c) ** p for c in str(n))
        snippet = f"print(sum(int(c)**{p} for c in str({n})))"
        text = f"Code: compute the sum of each digit of {n} raised to the power {p}."
    else:
        n = rng.randint(7, 60) * scale + 1
        steps, k = 0, n
        while k != 1:
            k, steps = (k // 2 if k % 2 == 0 else 3 * k + 1), steps + 1
        ans = steps
        snippet = (f"k, s = {n}, 0\nwhile k != 1:\n    k, s = (k // 2 if k % 2 == 0 else 3 * k + 1), s + 1\n"
                   "print(s)")
        text = f"Code: how many Collatz steps does {n} take to reach 1?"
    answer = str(ans)
    return Problem(text, answer, _distinct(answer, [ans + 1, ans - 1, ans * 2, ans + 10]), code=snippet, kind=kind)
