"""ember.tune's search spaces and search algorithms: pure, no cluster.

The seeded expectations were produced by Ray Tune 2.60's BasicVariantGenerator on the same
space (tests/test_tune_ray_compare.py runs whole programs on both)."""

from __future__ import annotations

import numpy as np
import pytest
from ember import tune
from ember.tune.search import BasicVariantGenerator, ConcurrencyLimiter, Searcher, SearchGenerator
from ember.tune.search.variants import generate_variants


def all_trials(gen: BasicVariantGenerator | SearchGenerator) -> list:
    out = []
    while (s := gen.next_trial()) is not None:
        out.append(s)
    return out


SPACE = {
    "u": tune.uniform(-1, 1),
    "q": tune.quniform(0, 10, 0.5),
    "l": tune.loguniform(1e-4, 1e-1),
    "ql": tune.qloguniform(1e-4, 1e-1, 5e-5),
    "n": tune.randn(2, 3),
    "qn": tune.qrandn(0, 1, 0.2),
    "i": tune.randint(0, 10),
    "qi": tune.qrandint(0, 20, 5),
    "li": tune.lograndint(1, 1000),
    "c": tune.choice(["a", 2, 3.5]),
    "g": tune.grid_search([1, 2]),
    "nest": {"h": tune.grid_search(["x", "y"]), "k": tune.randint(5, 6)},
}

# Ray 2.60: BasicVariantGenerator(random_state=42), the space above, num_samples=2.
RAY_TAGS = [
    "0_c=2,g=1,i=7,l=0.0377,li=228,n=-3.8531,h=x,k=5,q=4.5000,qi=15,ql=0.0123,qn=-1.4000,u=0.5479",
    "1_c=a,g=2,i=1,l=0.0603,li=46,n=5.3817,h=x,k=5,q=3.5000,qi=10,ql=0.0086,qn=0.4000,u=-0.0992",
    "2_c=3.5000,g=1,i=4,l=0.0079,li=216,n=-0.0428,h=y,k=5,q=8.5000,qi=20,ql=0.0188,qn=1.2000,u=-0.8724",
    "3_c=a,g=2,i=1,l=0.0003,li=12,n=8.4249,h=y,k=5,q=0.5000,qi=10,ql=0.0112,qn=-0.4000,u=-0.0666",
    "4_c=2,g=1,i=9,l=0.0002,li=314,n=-0.4734,h=x,k=5,q=2.0000,qi=10,ql=0.0027,qn=0.6000,u=-0.0609",
    "5_c=a,g=2,i=7,l=0.0260,li=3,n=2.6561,h=x,k=5,q=8.5000,qi=15,ql=0.0015,qn=0.8000,u=-0.3753",
    "6_c=a,g=1,i=5,l=0.0099,li=2,n=1.0410,h=y,k=5,q=8.0000,qi=10,ql=0.0131,qn=-0.4000,u=-0.9853",
    "7_c=2,g=2,i=1,l=0.0050,li=8,n=2.4883,h=y,k=5,q=4.5000,qi=0,ql=0.0197,qn=0.6000,u=0.3368",
]
RAY_LAST = {
    "u": 0.3368059235809433,
    "q": 4.5,
    "l": 0.004962589124369397,
    "ql": 0.019700000000000002,
    "n": 2.488259195315017,
    "qn": 0.6000000000000001,
    "i": 1,
    "qi": 0,
    "li": 8,
    "c": 2,
    "g": 2,
    "nest": {"h": "y", "k": 5},
}


def test_seeded_expansion_draws_what_ray_draws():
    gen = BasicVariantGenerator(random_state=42)
    gen.set_search_properties(None, None, SPACE, 2)
    assert gen.total_samples() == 8
    trials = all_trials(gen)
    assert [t.experiment_tag for t in trials] == RAY_TAGS
    assert trials[-1].config == RAY_LAST
    assert [t.trial_id[-5:] for t in trials] == [f"{i:05d}" for i in range(8)]
    assert len({t.trial_id[:6] for t in trials}) == 1  # one experiment prefix
    assert gen.finished


def test_grid_order_first_sorted_key_turns_fastest():
    space = {"b": tune.grid_search([1, 2]), "a": tune.grid_search(["x", "y", "z"])}
    got = [spec["config"] for _, spec in generate_variants({"config": space})]
    assert got == [
        {"b": 1, "a": "x"},
        {"b": 1, "a": "y"},
        {"b": 1, "a": "z"},
        {"b": 2, "a": "x"},
        {"b": 2, "a": "y"},
        {"b": 2, "a": "z"},
    ]


def test_num_samples_repeats_the_whole_grid():
    gen = BasicVariantGenerator()
    gen.set_search_properties(None, None, {"x": tune.grid_search([1, 2, 3])}, 3)
    assert [s.config["x"] for s in all_trials(gen)] == [1, 2, 3] * 3


def test_bounds_and_types_hold_over_many_draws():
    rng = np.random.default_rng(0)
    draws = {
        "randint": (tune.randint(3, 7), lambda v: isinstance(v, int) and 3 <= v < 7),
        "qrandint": (tune.qrandint(0, 20, 5), lambda v: v in (0, 5, 10, 15, 20)),
        "lograndint": (tune.lograndint(1, 100), lambda v: isinstance(v, int) and 1 <= v < 100),
        "uniform": (tune.uniform(2.0, 3.0), lambda v: 2.0 <= v <= 3.0),
        "quniform": (tune.quniform(0, 1, 0.25), lambda v: v in (0, 0.25, 0.5, 0.75, 1.0)),
        "loguniform": (tune.loguniform(1e-3, 1), lambda v: 1e-3 <= v <= 1),
        "choice": (tune.choice([None, "a", (1, 2)]), lambda v: v in (None, "a", (1, 2))),
    }
    for name, (domain, ok) in draws.items():
        values = [domain.sample(random_state=rng) for _ in range(200)]
        assert all(ok(v) for v in values), name
    # choice keeps each option's own type (no dtype coercion)
    assert {type(tune.choice([1, "s"]).sample(random_state=rng)) for _ in range(50)} == {int, str}


def test_sample_from_reads_other_sampled_values_in_both_spellings():
    gen = BasicVariantGenerator(random_state=1)
    space = {
        "a": tune.randint(1, 100),
        "twice": tune.sample_from(lambda config: config["a"] * 2),
        "old": tune.sample_from(lambda spec: spec.config.a + 1),
        "const": tune.sample_from(lambda: 7),
    }
    gen.set_search_properties(None, None, space, 3)
    for s in all_trials(gen):
        c = s.config
        assert c["twice"] == 2 * c["a"] and c["old"] == c["a"] + 1 and c["const"] == 7
        # as in Ray's Tuner, sample_from values stay out of the trial's name
        assert s.experiment_tag.endswith(f"_a={c['a']}")


def test_sample_from_chain_resolves_in_passes_when_used_as_domains():
    spec = {
        "config": {
            "c": tune.sample_from(lambda spec: spec.config.b * 10),
            "b": tune.sample_from(lambda spec: spec.config.a + 1),
            "a": tune.grid_search([1, 2]),
        }
    }
    got = [s["config"] for _, s in generate_variants(spec)]
    assert got == [{"c": 20, "b": 2, "a": 1}, {"c": 30, "b": 3, "a": 2}]


def test_a_cycle_is_named_not_a_hang():
    spec = {
        "config": {
            "a": tune.sample_from(lambda spec: spec.config.b),
            "b": tune.sample_from(lambda spec: spec.config.a),
        }
    }
    with pytest.raises(ValueError, match="cycle"):
        list(generate_variants(spec))


def test_bad_spaces_name_what_is_wrong():
    with pytest.raises(ValueError, match="nest/g"):
        list(generate_variants({"nest": {"g": {"grid_search": []}}}))
    with pytest.raises(TypeError, match="list of options"):
        tune.choice("abc")
    with pytest.raises(ValueError, match="q=7"):
        tune.qrandint(1, 5, 7).sample()
    with pytest.raises(ValueError, match="greater than 0"):
        tune.loguniform(0, 1).sample()
    with pytest.raises(ValueError, match="could not sample x"):
        list(generate_variants({"x": tune.sample_from(lambda spec: 1 / 0)}))
    with pytest.raises(ValueError, match="not supported"):
        list(generate_variants({"x": {"eval": "__import__('os').getcwd()"}}))


def test_points_to_evaluate_come_first_and_replace_samples():
    gen = BasicVariantGenerator(points_to_evaluate=[{"x": 0.5}], random_state=3)
    gen.set_search_properties(None, None, {"x": tune.uniform(1, 2), "y": tune.choice([7])}, 3)
    trials = all_trials(gen)
    assert len(trials) == 3 and trials[0].config == {"x": 0.5, "y": 7}
    assert all(1 <= t.config["x"] <= 2 for t in trials[1:])


def test_max_concurrent_holds_suggestions_until_one_completes():
    gen = BasicVariantGenerator(max_concurrent=2)
    gen.set_search_properties(None, None, {"x": tune.grid_search([1, 2, 3])}, 1)
    a, _ = gen.next_trial(), gen.next_trial()
    assert gen.next_trial() is None and not gen.finished
    gen.on_trial_complete(a.trial_id, {}, False)
    assert gen.next_trial().config == {"x": 3}


class CountingSearcher(Searcher):
    """A real (tiny) searcher: tries x = 0, 1, 2, ... and remembers every result."""

    def __init__(self, limit: int = 100, **kw):
        super().__init__(**kw)
        self.next_x = 0
        self.limit = limit
        self.seen: dict[str, list] = {}
        self.done: dict[str, bool] = {}

    def suggest(self, trial_id):
        if self.next_x >= self.limit:
            return Searcher.FINISHED
        self.next_x += 1
        return {"x": self.next_x - 1}

    def on_trial_result(self, trial_id, result):
        self.seen.setdefault(trial_id, []).append(result)

    def on_trial_complete(self, trial_id, result=None, error=False):
        self.done[trial_id] = error


def test_searcher_metric_mode_come_from_tune_config_and_it_can_finish_early():
    searcher = CountingSearcher(limit=2)
    gen = SearchGenerator(searcher)
    assert gen.set_search_properties("loss", "min", {}, 5)
    assert (searcher.metric, searcher.mode) == ("loss", "min")
    trials = all_trials(gen)
    assert [t.config for t in trials] == [{"x": 0}, {"x": 1}]
    assert gen.finished and len(trials[0].trial_id) == 8
    assert trials[1].experiment_tag == "1_x=1"


def test_concurrency_limiter_and_save_restore(tmp_path):
    limited = ConcurrencyLimiter(CountingSearcher(), max_concurrent=2)
    assert limited.suggest("t1") == {"x": 0} and limited.suggest("t2") == {"x": 1}
    assert limited.suggest("t3") is None
    limited.on_trial_result("t1", {"loss": 1})
    limited.on_trial_complete("t1", {"loss": 1})
    assert limited.suggest("t3") == {"x": 2}
    assert limited.searcher.seen == {"t1": [{"loss": 1}]} and limited.searcher.done == {"t1": False}
    path = tmp_path / "searcher.pkl"
    limited.save(str(path))
    fresh = ConcurrencyLimiter(CountingSearcher(), max_concurrent=2)
    fresh.restore(str(path))
    assert fresh.live == {"t2", "t3"} and fresh.searcher.next_x == 3
    assert fresh.suggest("t4") is None
    with pytest.raises(ValueError, match="max_concurrent"):
        ConcurrencyLimiter(CountingSearcher(), max_concurrent=0)


def test_concurrency_limiter_batch_reports_endings_together():
    limited = ConcurrencyLimiter(CountingSearcher(), max_concurrent=2, batch=True)
    limited.suggest("a"), limited.suggest("b")
    limited.on_trial_complete("a", {"v": 1})
    assert limited.searcher.done == {} and limited.suggest("c") is None
    limited.on_trial_complete("b", {"v": 2}, error=True)
    assert limited.searcher.done == {"a": False, "b": True}
    assert limited.suggest("c") == {"x": 2}
