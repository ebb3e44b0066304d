"""Reference for kiln-tune's pruner tests: Optuna's MedianPruner and SuccessiveHalvingPruner
(optuna 5.0.0; unchanged since 4.x) on a sequential study of 12 trials x 8 epochs, trial t
reporting v(t, s) = ((5 t) mod 7) / 7 + ((37 t + 11 s) mod 17) / 170 - 0.05 s at epoch s (0-based) and asking
should_prune after each report. Prints, per configuration, the (trial, epoch) where each
pruned trial stopped.

Run: /root/.cache/kiln/tfvenv/bin/python crates/kiln-tune/tests/reference/pruners_optuna.py
"""
import optuna

optuna.logging.set_verbosity(optuna.logging.WARNING)


def v(t, s):
    return ((5 * t) % 7) / 7 + ((37 * t + 11 * s) % 17) / 170 - 0.05 * s


def run(name, pruner, direction):
    study = optuna.create_study(direction=direction, pruner=pruner)
    stops = []
    for t in range(12):
        trial = study.ask()
        pruned = False
        for s in range(8):
            trial.report(v(t, s), s)
            if trial.should_prune():
                stops.append((t, s))
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
                pruned = True
                break
        if not pruned:
            study.tell(trial, v(t, 7))
    print(name, direction, stops)


for direction in ("minimize", "maximize"):
    run("median_default", optuna.pruners.MedianPruner(), direction)
    run(
        "median_2_2_2_3",
        optuna.pruners.MedianPruner(
            n_startup_trials=2, n_warmup_steps=2, interval_steps=2, n_min_trials=3
        ),
        direction,
    )
    run(
        "sh_1_2_0",
        optuna.pruners.SuccessiveHalvingPruner(
            min_resource=1, reduction_factor=2, min_early_stopping_rate=0
        ),
        direction,
    )
    run("sh_default", optuna.pruners.SuccessiveHalvingPruner(), direction)
    run(
        "sh_1_3_1",
        optuna.pruners.SuccessiveHalvingPruner(
            min_resource=1, reduction_factor=3, min_early_stopping_rate=1
        ),
        direction,
    )
