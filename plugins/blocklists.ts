import fp from 'fastify-plugin'
import { BlockList, type BlockListEvent, type BlockListStatus } from '../lib/net/blocklist.js'

export interface Blocklists {
  /** The name of the first list holding the address, or null. */
  match (address: string): string | null
  status (): BlockListStatus[]
  /** Whether every list has loaded once: until then the service is not ready. */
  loaded (): boolean
}

declare module 'fastify' {
  interface FastifyInstance {
    blocklists: Blocklists
  }
}

/**
 * Network block lists (IP_BLOCKLISTS, TOR_EXIT_LIST): read once before the service listens;
 * refreshed in the background afterwards, where a failed or suspicious refresh keeps the last
 * good list. A list that cannot be read at start does not stop the process (in a cluster that
 * is a crash loop, often only because a sidecar or a mirror is not up yet): it is retried with
 * backoff, and until every list has loaded the service is not ready and the API answers 503
 * rather than serve without the blocks the operator asked for.
 */
export default fp(async function blocklistsPlugin (fastify) {
  const { ipSources, torSource, refreshMs } = fastify.config.blocklists
  const lists: BlockList[] = []
  const onEvent = (event: BlockListEvent): void => {
    if (event.type === 'kept') fastify.log.warn({ list: event.name, reason: event.reason }, 'block list refresh refused; keeping the last good list')
    else if (event.type === 'unloaded') fastify.log.error({ list: event.name, reason: event.reason }, 'block list could not be loaded; not ready until it is, retrying')
    else fastify.log.info({ list: event.name, entries: event.entries }, 'block list loaded')
  }
  if (ipSources.length > 0) lists.push(new BlockList({ name: 'ip', sources: ipSources, refreshMs, onEvent }))
  if (torSource !== null) lists.push(new BlockList({ name: 'tor', sources: [torSource], refreshMs, onEvent }))
  await Promise.all(lists.map(async (list) => {
    try {
      await list.load()
    } catch (error) {
      fastify.log.error({ list: list.name, reason: (error as Error).message }, 'block list could not be loaded; not ready until it is, retrying')
    }
  }))
  for (const list of lists) list.start()

  fastify.decorate('blocklists', {
    match (address) {
      for (const list of lists) if (list.has(address)) return list.name
      return null
    },
    status () {
      return lists.map((list) => list.status())
    },
    loaded () {
      return lists.every((list) => list.loaded)
    }
  } satisfies Blocklists)
  fastify.addHook('onClose', async () => { for (const list of lists) list.stop() })
}, { name: 'blocklists', dependencies: ['config'], fastify: '5.x' })
