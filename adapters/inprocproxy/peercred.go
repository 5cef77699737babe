package inprocproxy

import "github.com/agentsandbox/sandbox/internal/peercred"

const peerCredSupported = peercred.Supported

// peerUID is the uid the kernel recorded for the peer (see internal/peercred).
var peerUID = peercred.UID
