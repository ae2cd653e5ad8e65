use super::*;

/// Five repeats at good (median 1000, sample sd √62.5 = 7.906, 0.79%
/// of the median) and at bad (median 800, sd √14.5 = 3.808, 0.48%):
/// the band is compare's, 3·√2·0.79% = 3.354%.
fn timing_ends() -> Ends {
    let good = [1000.0, 1010.0, 990.0, 1005.0, 995.0];
    let bad = [800.0, 805.0, 795.0, 802.0, 798.0];
    Ends::new(Kind::Timing, &good, &bad).unwrap()
}

#[test]
fn the_timing_band_is_compares_band_of_the_two_ends_repeats() {
    let e = timing_ends();
    assert_eq!((e.good, e.bad), (1000.0, 800.0));
    let s = 62.5f64.sqrt() / 1000.0;
    assert!((e.band - 3.0 * 2f64.sqrt() * s).abs() < 1e-12, "{e:?}");
    assert!((e.band - 0.033541).abs() < 1e-6, "{e:?}");
}

#[test]
fn a_timing_reading_is_like_the_end_whose_band_it_is_inside() {
    let e = timing_ends();
    // 990: 10 from good, inside its 3.354% (33.4 at 995); 190 from bad.
    assert_eq!(e.classify(990.0), Side::Good);
    assert_eq!(e.classify(1000.0), Side::Good);
    assert_eq!(e.classify(810.0), Side::Bad);
    assert_eq!(e.classify(800.0), Side::Bad);
    // 900: 100 from each, outside both bands (31.9 and 28.5).
    assert_eq!(e.classify(900.0), Side::Ambiguous);
    // Faster than good by more than the band: like neither.
    assert_eq!(e.classify(1100.0), Side::Ambiguous);
}

#[test]
fn a_timing_reading_inside_both_bands_goes_to_the_nearer_end() {
    // Good 100 (sd 1), bad 106 (sd 1): band 3·√2·1% = 4.243%, 6 apart
    // is more than 4.243% of 103 = 4.37, so they are told apart.
    let e = Ends::new(Kind::Timing, &[100.0, 101.0, 99.0], &[106.0, 107.0, 105.0]).unwrap();
    assert!((e.band - 0.042426).abs() < 1e-6, "{e:?}");
    // 103.5: 3.5 from good (its band there: 4.32) and 2.5 from bad
    // (4.43): inside both, nearer bad.
    assert_eq!(e.classify(103.5), Side::Bad);
    // 103: 3 from each: a tie stays good.
    assert_eq!(e.classify(103.0), Side::Good);
    assert_eq!(e.classify(102.0), Side::Good);
}

#[test]
fn ends_not_apart_by_more_than_the_band_are_refused() {
    // Good 100 (sd 1), bad 104: 4 apart, the band is 4.33 at 102.
    assert_eq!(
        Ends::new(Kind::Timing, &[100.0, 101.0, 99.0], &[104.0, 105.0, 103.0]),
        Err(NotApart::Inside {
            band: 3.0 * 2f64.sqrt() * 0.01
        })
    );
    // One reading per end: no band.
    assert_eq!(
        Ends::new(Kind::Timing, &[100.0], &[200.0]),
        Err(NotApart::NoBand)
    );
    assert_eq!(
        Ends::new(Kind::Exact, &[8.0], &[8.0]),
        Err(NotApart::Inside { band: 0.0 })
    );
}

#[test]
fn an_exact_counter_is_good_only_at_goods_value() {
    let e = Ends::new(Kind::Exact, &[8.0], &[9.0]).unwrap();
    assert_eq!(e.band, 0.0);
    assert_eq!(e.classify(8.0), Side::Good);
    assert_eq!(e.classify(9.0), Side::Bad);
    assert_eq!(e.classify(10.0), Side::Bad, "moved from good: not good");
}

/// [`search`] over commits whose medians are `readings`, classified by
/// `timing_ends`: where it ended and the commits it measured.
fn run_search(readings: &[f64]) -> (Outcome, Vec<usize>) {
    let e = timing_ends();
    let mut asked = Vec::new();
    let o = search(readings.len(), |i, _| {
        asked.push(i);
        Ok(e.classify(readings[i]))
    })
    .unwrap();
    (o, asked)
}

#[test]
fn bisection_ends_at_the_first_bad_like_commit() {
    let r = [
        1000.0, 1001.0, 998.0, 1003.0, 801.0, 799.0, 800.0, 802.0, 800.0,
    ];
    let (o, asked) = run_search(&r);
    assert_eq!(
        o,
        Outcome::Found {
            parent: 3,
            first: 4
        }
    );
    assert_eq!(asked, vec![4, 2, 3]);
}

#[test]
fn bisection_stops_at_an_ambiguous_commit_with_the_interval_it_has() {
    let r = [
        1000.0, 1001.0, 998.0, 900.0, 801.0, 799.0, 800.0, 802.0, 800.0,
    ];
    let (o, asked) = run_search(&r);
    assert_eq!(
        o,
        Outcome::Ambiguous {
            at: 3,
            lo: 2,
            hi: 4
        }
    );
    assert_eq!(asked, vec![4, 2, 3]);
    // Two commits: nothing to measure between them.
    let (o, asked) = run_search(&[1000.0, 800.0]);
    assert_eq!(
        o,
        Outcome::Found {
            parent: 0,
            first: 1
        }
    );
    assert!(asked.is_empty());
}

#[test]
fn a_site_counter_follows_its_function_renamed_since_good() {
    let f = |name: &str, hash: &str| crate::funchash::FunctionHash {
        module: None,
        name: name.into(),
        addr: 0,
        size: 1,
        hash: hash.into(),
    };
    let good = [f("calib_alloc_small", "1"), f("calib_request", "2")];
    let renamed = [f("calib_alloc_three", "1"), f("calib_request", "2")];
    assert_eq!(
        renamed_counter("malloc calls @ calib_alloc_small", &good, &renamed),
        Some("malloc calls @ calib_alloc_three".to_string())
    );
    // Renamed and changed: not the same function, not followed.
    let changed = [f("calib_alloc_three", "9"), f("calib_request", "2")];
    assert_eq!(
        renamed_counter("malloc calls @ calib_alloc_small", &good, &changed),
        None
    );
    assert_eq!(renamed_counter("allocs/req", &good, &renamed), None);
    // In a shared object of the build: keyed by its module, named
    // by the site without it.
    let lib = |name: &str, hash: &str| crate::funchash::FunctionHash {
        module: Some("libwork.so".into()),
        ..f(name, hash)
    };
    assert_eq!(
        renamed_counter(
            "malloc calls @ work_alloc",
            &[lib("work_alloc", "3")],
            &[lib("work_alloc_three", "3")]
        ),
        Some("malloc calls @ work_alloc_three".to_string())
    );
}

#[test]
fn paths_inside_the_repository_move_into_the_worktree() {
    let text = r#"argv = ["/src/app/build/server", "--root", "/src/application", "/src/app"]"#;
    assert_eq!(
        rebase_paths(text, Path::new("/src/app"), Path::new("/tmp/wt")),
        r#"argv = ["/tmp/wt/build/server", "--root", "/src/application", "/tmp/wt"]"#
    );
}
