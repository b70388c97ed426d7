#!/bin/bash
# The seed's cron script, unchanged except for the CPU command: `shoal
# cpu-usage` takes sacloud-cpu-usage's flags (--env-from and --zone are
# accepted and ignored) and prints its log lines and JSON from shoal's own
# per-second metrics; -c names shoal's config, where it finds its socket.
# --dest is shoal's sacloud/autoscaler-compatible socket (here the same path
# the seed used, so it does not change). Run it from cron as in the seed:
#   SHELL=/bin/bash
#   */2 * * * * bash /etc/autoscaler/autoscale.sh |& logger -t autoscale
# shoal's own policy (examples/seed-000.yaml) does the same every second
# without cron; this script is for keeping the seed's setup while moving.
set -e

cpu_usage=$(/usr/local/bin/shoal cpu-usage -c /etc/shoal/shoal.yaml --env-from /etc/autoscaler/core.config  --zone tk1b --prefix hscale-group --time 1 --query '.avg|round')

if [ $cpu_usage -gt 50 ]; then
    echo "Scale up"
    /usr/local/sbin/autoscaler inputs direct up --dest unix:/var/run/autoscaler/autoscaler.sock --resource-name hscale-group

elif [ $cpu_usage -lt 20 -a $cpu_usage -gt 1 ]; then
    echo "Scale down"
    /usr/local/sbin/autoscaler inputs direct down --dest unix:/var/run/autoscaler/autoscaler.sock --resource-name hscale-group
else
    echo "Keep"
    /usr/local/sbin/autoscaler inputs direct up --dest unix:/var/run/autoscaler/autoscaler.sock --desired-state-name smallest --resource-name hscale-group

fi
