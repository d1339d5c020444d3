import fp from 'fastify-plugin'
import { BlockList, type BlockListStatus } from '../lib/net/blocklist.js'

export interface Blocklists {
  /** The name of the first list holding the address, or null. */
  match (address: string): string | null
  status (): BlockListStatus[]
}

declare module 'fastify' {
  interface FastifyInstance {
    blocklists: Blocklists
  }
}

/**
 * Network block lists (IP_BLOCKLISTS, TOR_EXIT_LIST): loaded before the service listens, so
 * a list that cannot be read stops start-up; refreshed in the background afterwards, where
 * a failed or suspicious refresh keeps the last good list.
 */
export default fp(async function blocklistsPlugin (fastify) {
  const { ipSources, torSource, refreshMs } = fastify.config.blocklists
  const lists: BlockList[] = []
  const onEvent = (event: { type: string, name: string, entries?: number, reason?: string }): void => {
    if (event.type === 'kept') fastify.log.warn({ list: event.name, reason: event.reason }, 'block list refresh refused; keeping the last good list')
    else fastify.log.info({ list: event.name, entries: event.entries }, 'block list loaded')
  }
  if (ipSources.length > 0) lists.push(new BlockList({ name: 'ip', sources: ipSources, refreshMs, onEvent }))
  if (torSource !== null) lists.push(new BlockList({ name: 'tor', sources: [torSource], refreshMs, onEvent }))
  await Promise.all(lists.map(async (list) => { await list.load() }))
  for (const list of lists) list.start()

  fastify.decorate('blocklists', {
    match (address) {
      for (const list of lists) if (list.has(address)) return list.name
      return null
    },
    status () {
      return lists.map((list) => list.status())
    }
  } satisfies Blocklists)
  fastify.addHook('onClose', async () => { for (const list of lists) list.stop() })
}, { name: 'blocklists', dependencies: ['config'], fastify: '5.x' })
