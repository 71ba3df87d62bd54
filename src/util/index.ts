/** General helpers that belong to no one layer. */
export { checkInt, checkIntegerOption, checkKnown } from './check.js'
export { mapLimit } from './concurrency.js'
export { Slots } from './slots.js'
export { fdClose, fdOpen, fdSync, fsyncAndClose, fsyncDir, sha256File } from './fs.js'
export { sleep } from './sleep.js'
export { describeValue, printable } from './describe-value.js'
export { Registry } from './registry.js'
export { requireOptionalPeer } from './optional-peer.js'
