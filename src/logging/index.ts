/** The logging layer's door for the connectors: its public API and what a runtime needs besides. */
export * from './public.js'
export { callListener } from './listener.js'
