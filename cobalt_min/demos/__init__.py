"""The demos' closing summaries: what demo.sh, demo_repair.sh, demo_hacking.sh and compare.sh print and plot at their end
(python -m cobalt_min.demos.NAME FOLDER)."""
