"""The chaos driver's report file and page, without a rig: one report per
backend in one JSON file, a rerun replacing its backend's, the page saying
what each run checked and what it could not."""
import json

from tools.rig import chaos
from tools.rig.chaos import core


def _report(backend, **extra):
  return dict(dict(
      backend=backend, seed=1, minutes=60, gap=[60, 180], hosts=4,
      faults=[dict(kind="kill_task", host="host2", began=70.0, visible=70.0,
                   ended=None, recovery=31.5)],
      kinds=["kill_task"], updates=900, epochs=13, restarts=1,
      each_example_once=True, problem=None, slowest_recovery=31.5,
      exit_code=0, processes_left={}, namespaces_left=[],
      error_lines_at_end=[]), **extra)


def test_a_rerun_replaces_its_backends_report_and_keeps_the_others(tmp_path):
  path = tmp_path / "chaos.json"
  chaos.save(_report("slurm"), path)
  chaos.save(_report("horovod"), path)
  chaos.save(_report("slurm", seed=9), path)
  reports = json.loads(path.read_text())
  assert [r["backend"] for r in reports] == ["horovod", "slurm"]
  assert reports[1]["seed"] == 9


def test_a_file_of_one_report_becomes_a_list(tmp_path):
  path = tmp_path / "chaos.json"
  old = _report("horovod")
  del old["backend"]  # as reports were before there were backends
  path.write_text(json.dumps(old))
  chaos.save(_report("ps_sync"), path)
  assert [r.get("backend", "horovod")
          for r in json.loads(path.read_text())] == ["horovod", "ps_sync"]


def test_the_page_has_a_section_per_backend_and_the_comparison():
  free = {"step": 900, "max_abs_diff": 3e-7,
          "chaos": {"loss": 1.0712, "accuracy": 0.41},
          "fault_free": {"loss": 1.0712, "accuracy": 0.41}}
  page = chaos.render([_report("horovod"), _report(
      "ps_sync", fault_free=free, notes=["Measured after the run."])])
  assert "## Elastic Horovod" in page and "## Synchronous parameter" in page
  assert "largest weight difference 3e-07" in page
  assert "global batch follows the ranks" in page  # Horovod's: not compared
  assert "\nMeasured after the run.\n" in page


def test_error_lines_are_read_from_the_offset_on(tmp_path):
  log = tmp_path / "job.log"
  log.write_text("[host2 chief:0] Traceback (most recent call last):\n")
  calm = log.stat().st_size
  with open(log, "a") as f:
    f.write("[host2 chief:0] I1129 step 10\n"
            "[host3 worker:0] E1129 12:00:00.0 1 rpc.cc:1] lost\n"
            "[host3 worker:0] a line without trouble\n")
  assert core.error_lines(str(log), calm) == [
      "[host3 worker:0] E1129 12:00:00.0 1 rpc.cc:1] lost"]
  assert len(core.error_lines(str(log), 0)) == 2


def test_the_click_jobs_comparison_is_its_held_out_auc():
  free = {"step": 4000, "max_abs_diff": 2e-6,
          "chaos": {"auc": 0.71234, "loss": 0.51},
          "fault_free": {"auc": 0.71301, "loss": 0.5098}}
  page = chaos.render(_report("slurm", fault_free=free, case="click",
                              examples=40000))
  assert "held-out AUC 0.7123 against 0.7130 (-0.0007)" in page
  assert "epochs of 40000 examples" in page
  assert "`python -m tools.rig.chaos --case click --backend slurm --seed 1" in (
      page)


def test_the_page_says_which_faults_landed_inside_a_moment():
  faults = [dict(kind="kill_rank", host="host3", began=70.0, visible=70.0,
                 ended=None, recovery=31.5, moment="merge",
                 moment_host="host2"),
            dict(kind="join", host="host5", began=200.0, visible=200.0,
                 ended=None, recovery=None,
                 note="re-shard held for the next fault"),
            dict(kind="pause", host="host4", began=230.0, visible=260.0,
                 ended=290.0, recovery=35.0, moment="reshard",
                 moment_host="host5")]
  page = chaos.render(_report("horovod", faults=faults))
  assert "| faults inside a moment | 1 in a merge of the tables' parts, " \
         "1 in a re-shard |" in page
  assert "| 70 | kill_rank | host3 | a merge of the tables' parts on host2 " \
         "| 31.5 |" in page
  assert "| 200 | join | host5 |  | re-shard held for the next fault |" in page
  assert "2 of 2" in page  # the held join has no recovery of its own
  assert "none (faults at random times only)" in chaos.render(_report("slurm"))


def test_an_oom_fault_is_a_row_like_the_others_and_the_page_says_what_it_is():
  faults = [dict(kind="oom", host="host3", began=80.0, visible=80.0,
                 ended=80.1, recovery=12.5)]
  page = chaos.render(_report("ps_sync", faults=faults, kinds=["oom"]))
  assert "| 80 | oom | host3 |  | 12.5 |" in page
  assert "| faults | 1 of 1 kinds (oom) |" in page
  assert "kernel's OOM killer takes its biggest process" in page
