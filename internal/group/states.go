package group

// States lists every instance state in lifecycle order, for validating user
// input such as `shoal instances --state`.
var States = []State{Starting, InService, Draining, Stopping, Failed}
