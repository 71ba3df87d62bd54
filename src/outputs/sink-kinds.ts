import { Registry } from '../util/index.js'
import type { OutputSink } from './types.js'

/**
 * The output sinks other than the file log's, by kind ('kafka'), for the
 * commands that write outputs named on a command line: registered by a
 * connector's entry point when it is imported (connectors/kafka registers
 * 'kafka').
 */
export const sinkKinds = new Registry<(options: { brokers: string[] }) => OutputSink>('output sink kind')
