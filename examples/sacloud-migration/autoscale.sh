#!/bin/bash
# The seed's cron script, unchanged except for --dest, which now points at
# shoal's sacloud/autoscaler-compatible socket (here the same path the seed
# used, so not even that changes). Run it from cron as in the seed:
#   SHELL=/bin/bash
#   */2 * * * * bash /etc/autoscaler/autoscale.sh |& logger -t autoscale
# The CPU query stays as in the seed until shoal's own metrics arrive.
set -e

cpu_usage=$(/usr/local/bin/sacloud-cpu-usage --env-from /etc/autoscaler/core.config  --zone tk1b --prefix hscale-group --time 1 --query '.avg|round')

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
