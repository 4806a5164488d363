use super::*;

#[test]
fn greedy_picks_the_largest_allowed() {
    let mut l = vec![1.0, 5.0, f32::NEG_INFINITY, 3.0];
    assert_eq!(
        Sampler::new(SamplingOptions::greedy()).sample(&mut l, &[]),
        Some(TokenId(1))
    );
    let mut l = vec![f32::NEG_INFINITY; 3];
    assert_eq!(
        Sampler::new(SamplingOptions::greedy()).sample(&mut l, &[]),
        None
    );
}

#[test]
fn same_seed_same_draws_and_masked_never_drawn() {
    let logits: Vec<f32> = (0..50)
        .map(|i| {
            if i % 7 == 0 {
                f32::NEG_INFINITY
            } else {
                (i % 5) as f32
            }
        })
        .collect();
    let draw = |seed| {
        let mut s = Sampler::new(SamplingOptions {
            seed,
            top_p: None,
            ..SamplingOptions::default()
        });
        (0..200)
            .map(|_| s.sample(&mut logits.clone(), &[]).unwrap().get())
            .collect::<Vec<_>>()
    };
    let a = draw(1);
    assert_eq!(a, draw(1));
    assert_ne!(a, draw(2));
    assert!(a.iter().all(|t| t % 7 != 0));
}

/// The draw as it was with the whole candidate list sorted first: sorting only the
/// prefix the cuts and the draw reach picks the same tokens.
fn draw_fully_sorted(o: &SamplingOptions, rng: &mut Rng, logits: &[f32]) -> u32 {
    let mut c: Vec<(u32, f32)> = logits
        .iter()
        .enumerate()
        .filter(|(_, l)| l.is_finite())
        .map(|(i, &l)| (i as u32, l / o.temperature))
        .collect();
    let by_logit = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
    if let Some(k) = o.top_k.filter(|&k| k > 0 && k < c.len()) {
        c.select_nth_unstable_by(k - 1, by_logit);
        c.truncate(k);
    }
    c.sort_unstable_by(by_logit);
    let max = c[0].1;
    for x in c.iter_mut() {
        x.1 = ((x.1 - max) as f64).exp() as f32;
    }
    let mut total: f64 = c.iter().map(|x| x.1 as f64).sum();
    if let Some(m) = o.min_p {
        let keep = c.iter().take_while(|x| x.1 >= c[0].1 * m).count().max(1);
        c.truncate(keep);
        total = c.iter().map(|x| x.1 as f64).sum();
    }
    if let Some(p) = o.top_p {
        let mut acc = 0.0;
        let keep = c
            .iter()
            .position(|x| {
                acc += x.1 as f64 / total;
                acc >= p as f64
            })
            .map_or(c.len(), |i| i + 1);
        c.truncate(keep);
        total = c.iter().map(|x| x.1 as f64).sum();
    }
    let mut r = rng.next_f64() * total;
    for x in &c {
        r -= x.1 as f64;
        if r < 0.0 {
            return x.0;
        }
    }
    c[c.len() - 1].0
}

#[test]
fn sorting_only_the_needed_prefix_draws_the_same_tokens() {
    let mut next = Rng::new(7);
    // A vocabulary-sized row with a few masked tokens, flat and peaked.
    for peak in [0.5f64, 4.0, 12.0] {
        let logits: Vec<f32> = (0..20_000)
            .map(|i| match i % 97 {
                0 => f32::NEG_INFINITY,
                _ => (next.next_f64() * peak) as f32,
            })
            .collect();
        for (top_k, top_p, min_p) in [
            (None, None, None),
            (None, Some(0.95), None),
            (None, Some(0.5), None),
            (Some(300), Some(0.9), None),
            (None, None, Some(0.05)),
            (None, Some(0.99), Some(0.001)),
        ] {
            let o = SamplingOptions {
                temperature: 0.8,
                top_k,
                top_p,
                min_p,
                seed: 3,
                ..SamplingOptions::default()
            };
            let mut s = Sampler::new(o.clone());
            let mut reference = Rng::new(3);
            for _ in 0..50 {
                let got = s.sample(&mut logits.clone(), &[]).unwrap().get();
                let want = draw_fully_sorted(&o, &mut reference, &logits);
                assert_eq!(got, want, "peak {peak}, {o:?}");
            }
        }
    }
}

#[test]
fn top_k_top_p_min_p_restrict_the_choice() {
    let logits = vec![0.0, 10.0, 9.0, 1.0, 8.0];
    let run = |opts: SamplingOptions| {
        let mut s = Sampler::new(opts);
        let mut seen: Vec<u32> = (0..300)
            .map(|_| s.sample(&mut logits.clone(), &[]).unwrap().get())
            .collect();
        seen.sort_unstable();
        seen.dedup();
        seen
    };
    let base = SamplingOptions {
        temperature: 1.0,
        top_p: None,
        ..SamplingOptions::default()
    };
    assert_eq!(
        run(SamplingOptions {
            top_k: Some(2),
            ..base.clone()
        }),
        vec![1, 2]
    );
    assert_eq!(
        run(SamplingOptions {
            min_p: Some(0.1),
            ..base.clone()
        }),
        vec![1, 2, 4]
    );
    assert_eq!(
        run(SamplingOptions {
            top_p: Some(0.5),
            ..base
        }),
        vec![1]
    );
}

#[test]
fn out_of_range_settings_are_errors() {
    assert!(SamplingOptions::default().validate().is_ok());
    assert!(SamplingOptions::greedy().validate().is_ok());
    let bad = [
        SamplingOptions {
            temperature: f32::NAN,
            ..Default::default()
        },
        SamplingOptions {
            temperature: -1.0,
            ..Default::default()
        },
        SamplingOptions {
            top_p: Some(2.0),
            ..Default::default()
        },
        SamplingOptions {
            top_p: Some(0.0),
            ..Default::default()
        },
        SamplingOptions {
            min_p: Some(5.0),
            ..Default::default()
        },
        SamplingOptions {
            top_k: Some(0),
            ..Default::default()
        },
        SamplingOptions {
            repetition_penalty: 0.0,
            ..Default::default()
        },
    ];
    for o in bad {
        let e = o.validate().unwrap_err();
        assert!(e.to_string().contains(e.name), "{e}");
    }
}

#[test]
fn repetition_penalty_lowers_repeated_tokens() {
    let mut l = vec![2.0, 1.9, -1.0];
    let opts = SamplingOptions {
        repetition_penalty: 2.0,
        ..SamplingOptions::greedy()
    };
    assert_eq!(
        Sampler::new(opts).sample(&mut l, &[TokenId(0), TokenId(2)]),
        Some(TokenId(1))
    );
    assert_eq!(l, vec![1.0, 1.9, -2.0]);
}

/// vLLM's sampler (its V1 `Sampler.sample` and `apply_top_k_top_p`), written from its
/// documented order on the same logits: temperature; min-p (tokens whose probability is
/// below `min_p` times the largest are dropped); top-k (logits below the k-th largest
/// dropped); top-p (sorted ascending, the tokens whose cumulative probability is at most
/// `1 - top_p` dropped, the most likely always kept); then the softmax of what is left.
fn vllm_reference(logits: &[f32], o: &SamplingOptions) -> Vec<(u32, f64)> {
    let mut l: Vec<f64> = logits
        .iter()
        .map(|&x| x as f64 / o.temperature as f64)
        .collect();
    let softmax = |l: &[f64]| {
        let max = l.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = l.iter().map(|x| (x - max).exp()).collect();
        let sum: f64 = e.iter().sum();
        e.into_iter().map(|x| x / sum).collect::<Vec<f64>>()
    };
    if let Some(m) = o.min_p {
        let p = softmax(&l);
        let top = p.iter().copied().fold(0.0, f64::max);
        for (x, px) in l.iter_mut().zip(&p) {
            if *px < m as f64 * top {
                *x = f64::NEG_INFINITY;
            }
        }
    }
    let mut order: Vec<usize> = (0..l.len()).collect();
    order.sort_by(|&a, &b| l[a].total_cmp(&l[b]));
    if let Some(k) = o.top_k {
        let threshold = l[order[l.len() - k.min(l.len())]];
        for x in l.iter_mut() {
            if *x < threshold {
                *x = f64::NEG_INFINITY;
            }
        }
    }
    if let Some(p) = o.top_p {
        let sorted: Vec<f64> = order.iter().map(|&i| l[i]).collect();
        let probs = softmax(&sorted);
        let mut cum = 0.0;
        for (j, &i) in order.iter().enumerate() {
            cum += probs[j];
            if cum <= 1.0 - p as f64 && j + 1 < order.len() {
                l[i] = f64::NEG_INFINITY;
            }
        }
    }
    let p = softmax(&l);
    let mut out: Vec<(u32, f64)> = p
        .into_iter()
        .enumerate()
        .filter(|(_, x)| *x > 0.0)
        .map(|(i, x)| (i as u32, x))
        .collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1));
    out
}

#[test]
fn the_distribution_is_vllms_on_the_same_logits() {
    let mut rng = Rng::new(3);
    let settings = [
        (1.0, None, None, None),
        (0.7, None, Some(0.95), None),
        (1.0, Some(40), None, None),
        (1.3, Some(50), Some(0.9), None),
        (0.8, None, None, Some(0.05)),
        (1.0, Some(20), Some(0.8), Some(0.02)),
        (0.5, None, Some(0.5), Some(0.1)),
    ];
    for round in 0..20 {
        // Distinct logits (no ties, which the two order differently), some far apart.
        let logits: Vec<f32> = (0..300)
            .map(|i| (rng.next_f64() * 12.0 - 6.0) as f32 + i as f32 * 1e-4)
            .collect();
        for &(temperature, top_k, top_p, min_p) in &settings {
            let o = SamplingOptions {
                temperature,
                top_k,
                top_p,
                min_p,
                ..SamplingOptions::default()
            };
            let ours = Sampler::new(o.clone()).distribution(&logits);
            let theirs = vllm_reference(&logits, &o);
            assert_eq!(
                ours.len(),
                theirs.len(),
                "round {round}, {temperature} {top_k:?} {top_p:?} {min_p:?}: tokens kept"
            );
            for ((t, p), (u, q)) in ours.iter().zip(&theirs) {
                assert_eq!(t.0, *u, "round {round}: the same tokens, in order");
                assert!((p - q).abs() < 1e-5, "round {round}: token {u}: {p} vs {q}");
            }
        }
    }
}
