-- wrk -s scripts/wrk-percentiles.lua: the latency percentiles wrk's
-- --latency table leaves out (p95, p99.9), in µs, after its own summary.
done = function(summary, latency, requests)
  for _, p in ipairs({50, 95, 99, 99.9}) do
    io.write(string.format("p%g %.1f us\n", p, latency:percentile(p)))
  end
  io.write(string.format("requests %d, max %.1f us\n", summary.requests, latency.max))
end
