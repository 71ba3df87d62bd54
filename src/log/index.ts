/** The log layer's door for the connectors: its public API and the registry of log kinds. */
export * from './public.js'
export { logKinds, type BrokerLogAddress } from './kinds.js'
export { onAppendHere } from './file-log/index.js'
