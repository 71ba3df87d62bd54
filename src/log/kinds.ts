import { Registry } from '../util/index.js'
import type { RevisionedLog } from './revisioned-log.js'

/** Where a log kind's partition is: a broker list, a topic and a partition. */
export interface BrokerLogAddress {
  brokers: string[]
  topic: string
  partition: number
}

/**
 * The logs other than the file log, by kind ('kafka'), for the commands that
 * open one from a command line: registered by a connector's entry point when
 * it is imported (connectors/kafka registers 'kafka').
 */
export const logKinds = new Registry<(address: BrokerLogAddress) => Promise<RevisionedLog>>('log kind')
