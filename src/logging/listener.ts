import { noopLogger, type Logger } from './logger.js'

/**
 * Calls a listener (an event listener, an onEvent or onProgress callback)
 * from where its error has nobody to go to: a delivery loop, a timer, a
 * snapshot nobody awaits, a restore. A throw is the listener's bug and must
 * not stop what called it (thrown on, it ended a loop or was an unhandled
 * rejection, which ends a Node process): it is logged, with `fields`, and
 * `fallback` is returned.
 */
export function callListener<T>(call: () => T, fallback: T, logger: Logger = noopLogger, fields: object = {}): T {
  try {
    return call()
  } catch (err) {
    logger.error({ ...fields, err }, 'a listener threw; what called it goes on')
    return fallback
  }
}
