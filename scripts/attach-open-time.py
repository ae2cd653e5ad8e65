"""How long `rig attach --probes all` takes to open its window, for several
rig binaries measured interleaved against one calibration server.

    python3 scripts/attach-open-time.py NAME=RIG[,NAME=RIG...] ORDER CALIB_SERVER

ORDER is the comma-separated sequence of NAMEs to run (e.g.
before,after,after,before,before,after). Each run is `RIG attach --pid
<server> --probes all --drive http://127.0.0.1:<port>/calib --requests
1000`; it prints the time rig reports on its `probes attached in X s`
line, the run's wall time and the CPU time (system, user) of the rig
process, then the median of each per NAME. Run as root."""
import re
import resource
import statistics
import subprocess
import sys
import time

bins = dict(a.split("=", 1) for a in sys.argv[1].split(","))
order = sys.argv[2].split(",")
srv = subprocess.Popen([sys.argv[3], "--port", "0", "--threads", "2"],
                       stdout=subprocess.PIPE, text=True)
port = int(re.search(r"port=(\d+)", srv.stdout.readline()).group(1))
runs = {name: [] for name in bins}
try:
    for name in order:
        t0 = time.monotonic()
        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        p = subprocess.Popen(
            [bins[name], "attach", "--pid", str(srv.pid), "--probes", "all",
             "--drive", f"http://127.0.0.1:{port}/calib", "--requests", "1000"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        attached = None
        for line in p.stderr:
            m = re.search(r"probes attached in ([\d.]+) s", line)
            if m:
                attached = float(m.group(1))
        code = p.wait()
        wall = time.monotonic() - t0
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        sys_s, user_s = ru1.ru_stime - ru0.ru_stime, ru1.ru_utime - ru0.ru_utime
        runs[name].append((attached, wall, sys_s, user_s))
        print(f"{name}: exit {code}; probes attached in {attached} s; wall {wall:.2f} s; "
              f"sys {sys_s:.2f} s; user {user_s:.2f} s", flush=True)
finally:
    srv.kill()
    srv.wait()
for name, v in runs.items():
    med = [statistics.median(x[i] for x in v) for i in range(4)]
    print(f"{name}: median of {len(v)}: probes attached in {med[0]:.2f} s, wall {med[1]:.2f} s, "
          f"sys {med[2]:.2f} s, user {med[3]:.2f} s")
