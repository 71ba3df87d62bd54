export { replayJob } from './replay-job.js'
export type { ReplayResult } from './replay-job.js'
export { REPLAY_DEFAULTS } from './options.js'
export type { ReplayCheckpoints, ReplayContext, ReplayHandler, ReplayJobOptions, ReplayProgress, ReplaySource, ReplayStart } from './options.js'
