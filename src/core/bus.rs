//! The bus: every subscription, by event, lane and wrapper lane, in
//! firing order.

use std::collections::HashMap;

use crate::core::callbacks::HookEntry;
use crate::core::points::{HookEvent, Lane, LaneForm, LaneId, Point};
use crate::core::wrappers::WrapEntry;

/// Subscriptions by event, ordered by (priority, registration order).
#[derive(Debug, Clone)]
pub struct HookBus {
    by_event: [Vec<HookEntry>; HookEvent::COUNT],
    /// The dialects' lanes that have subscriptions, by (point, order).
    lanes: Vec<(LaneId, Vec<HookEntry>)>,
    /// Wrapper lanes' subscriptions (a before/after pair each).
    wrappers: Vec<(LaneId, Vec<WrapEntry>)>,
    /// Names no event matches: accepted (with a warning) and never fired.
    unknown: HashMap<String, Vec<HookEntry>>,
}

impl Default for HookBus {
    fn default() -> Self {
        HookBus {
            by_event: std::array::from_fn(|_| Vec::new()),
            lanes: Vec::new(),
            wrappers: Vec::new(),
            unknown: HashMap::new(),
        }
    }
}

impl HookBus {
    /// Subscribe to a known event.
    pub fn add(&mut self, event: HookEvent, entry: HookEntry) {
        let list = match event {
            HookEvent::Lane(id) => self.lane_list(id),
            core => &mut self.by_event[core.index()],
        };
        let at = list.partition_point(|e| e.priority <= entry.priority);
        list.insert(at, entry);
    }

    /// The subscription list of a dialect's lane, made in (point, order)
    /// place the first time.
    fn lane_list(&mut self, id: LaneId) -> &mut Vec<HookEntry> {
        let key = |l: &Lane| (l.point as u8, l.order);
        let at = match self.lanes.iter().position(|(l, _)| *l == id) {
            Some(at) => at,
            None => {
                let at = self
                    .lanes
                    .partition_point(|(l, _)| key(l.lane()) <= key(id.lane()));
                self.lanes.insert(at, (id, Vec::new()));
                at
            }
        };
        &mut self.lanes[at].1
    }

    /// Subscribe a before/after pair to a wrapper lane (a lane whose row's
    /// form is [`LaneForm::Wrapper`]); a plain lane refuses it, naming it.
    pub fn wrap(&mut self, lane: &'static Lane, entry: WrapEntry) -> Result<(), String> {
        if lane.form != LaneForm::Wrapper {
            return Err(format!(
                "{} is not a wrapper lane: subscribe a callback to it instead",
                lane.name
            ));
        }
        let id = LaneId(lane);
        let at = match self.wrappers.iter().position(|(l, _)| *l == id) {
            Some(at) => at,
            None => {
                self.wrappers.push((id, Vec::new()));
                self.wrappers.len() - 1
            }
        };
        let list = &mut self.wrappers[at].1;
        let at = list.partition_point(|e| e.priority <= entry.priority);
        list.insert(at, entry);
        Ok(())
    }

    /// The before/after pairs of wrapper lane `lane`, outermost first.
    #[inline]
    pub fn wrappers(&self, lane: &'static Lane) -> &[WrapEntry] {
        let id = LaneId(lane);
        self.wrappers
            .iter()
            .find(|(l, _)| *l == id)
            .map_or(&[], |(_, v)| v.as_slice())
    }

    /// Subscribe to a name the bus does not know (it will never fire).
    pub fn add_unknown(&mut self, name: &str, entry: HookEntry) {
        self.unknown
            .entry(name.to_string())
            .or_default()
            .push(entry);
    }

    /// The subscriptions of `event`, in firing order.
    #[inline]
    pub fn entries(&self, event: HookEvent) -> &[HookEntry] {
        match event {
            HookEvent::Lane(id) => self
                .lanes
                .iter()
                .find(|(l, _)| *l == id)
                .map_or(&[], |(_, v)| v.as_slice()),
            core => &self.by_event[core.index()],
        }
    }

    /// The dialects' lanes at `point` that have subscriptions, in their
    /// rows' order, with their subscriptions.
    pub fn lanes_at(&self, point: Point) -> impl Iterator<Item = (HookEvent, &[HookEntry])> {
        self.lanes
            .iter()
            .filter(move |(l, v)| l.lane().point == point && !v.is_empty())
            .map(|(l, v)| (HookEvent::Lane(*l), v.as_slice()))
    }

    /// Subscriptions to names that never fire, by name.
    pub fn unknown(&self) -> &HashMap<String, Vec<HookEntry>> {
        &self.unknown
    }

    /// Every subscription to an event that fires: the core's events, then
    /// the dialects' lanes.
    pub fn subscriptions(&self) -> impl Iterator<Item = (HookEvent, &HookEntry)> {
        HookEvent::ALL
            .iter()
            .chain(HookEvent::LOOP_POINTS.iter())
            .flat_map(move |e| self.entries(*e).iter().map(move |h| (*e, h)))
            .chain(
                self.lanes
                    .iter()
                    .flat_map(|(l, v)| v.iter().map(move |h| (HookEvent::Lane(*l), h))),
            )
    }

    /// Every (event name, entry) pair, known events first, each event
    /// named as its plugin named it ([`HookEntry::event_shown`]).
    pub fn iter(&self) -> impl Iterator<Item = (String, &HookEntry)> {
        self.subscriptions()
            .map(|(e, h)| (h.event_shown(e), h))
            .chain(
                self.unknown
                    .iter()
                    .flat_map(|(n, v)| v.iter().map(move |h| (n.clone(), h))),
            )
    }

    /// Remove every subscription of `owner` (rolls back a failed plugin).
    pub fn remove_owner(&mut self, owner: &str) {
        for list in self
            .by_event
            .iter_mut()
            .chain(self.lanes.iter_mut().map(|(_, v)| v))
        {
            list.retain(|e| e.owner != owner);
        }
        for (_, list) in &mut self.wrappers {
            list.retain(|e| e.owner != owner);
        }
        for list in self.unknown.values_mut() {
            list.retain(|e| e.owner != owner);
        }
        self.unknown.retain(|_, v| !v.is_empty());
    }
}
